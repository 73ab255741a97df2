"""FlagGems wiring, tested with flag_gems STUBBED: FlagGems needs a GPU, so a fake
``flag_gems`` module, written in plain PyTorch after FlagGems 5.0.2's source (the argument
checks of ``apply_rotary_pos_emb`` included), is put into ``sys.modules``. The tests check
which FlagGems entry point each impl calls, with which arguments (which half is gated, the
cos/sin layout, GPT-J = interleaved), the returned form, and that inputs are left alone. The
real kernels' numerics are checked on the GPU by the generated parity tests.
"""

import sys
import types

import pytest
import torch
import torch.nn.functional as F
from tests.support.ops_helpers import DTYPES, cos_sin_cache, TOLERANCES, assert_fresh, unchanged

from vllm_fl.backends.flaggems.impl import activation, attention, normalization, rotary
from vllm_fl.backends.reference.impl import activation as ref_act
from vllm_fl.backends.reference.impl import attention as ref_attention
from vllm_fl.backends.reference.impl import normalization as ref_norm
from vllm_fl.backends.reference.impl import rotary as ref_rotary
from vllm_fl.kernels import attention as kernels_attention


class Layer:
    def __init__(self, **attrs):
        self.__dict__.update(attrs)


class FakeFlagGems(types.ModuleType):
    """FlagGems 5.0.2's entry points that vllm_fl calls, in plain PyTorch (float32 compute,
    one rounding, as its kernels do), recording their calls."""

    def __init__(self):
        super().__init__("flag_gems")
        self.calls = []

    def _record(self, name, *args, **kwargs):
        self.calls.append((name, args, kwargs))

    def swiglu(self, x, quantizer=None):
        self._record("swiglu", x)
        a, b = x.float().chunk(2, dim=-1)
        return (F.silu(a) * b).to(x.dtype)

    def silu_and_mul(self, a, b):
        self._record("silu_and_mul", a, b)
        return (F.silu(a.float()) * b.float()).to(a.dtype)

    def gelu_and_mul(self, a, b, approximate="none"):
        self._record("gelu_and_mul", a, b, approximate)
        return (F.gelu(a.float(), approximate=approximate) * b.float()).to(a.dtype)

    def gelu(self, x, *, approximate="none"):
        self._record("gelu", x, approximate=approximate)
        return F.gelu(x.float(), approximate=approximate).to(x.dtype)

    def mul(self, a, b):
        self._record("mul", a, b)
        return a * b

    def sigmoid(self, x):
        self._record("sigmoid", x)
        return torch.sigmoid(x)

    def rms_norm(self, x, normalized_shape, weight, eps=1e-5):
        self._record("rms_norm", x, list(normalized_shape), weight, eps)
        assert list(normalized_shape) == [x.shape[-1]] == list(weight.shape)
        x32 = x.float()
        rrms = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
        return (x32 * rrms * weight.float()).to(x.dtype)

    def fused_add_rms_norm(self, x, residual, normalized_shape, weight, eps=1e-5):
        """In place: residual <- x + residual, x <- rms_norm(residual) (the float32 sum)."""
        self._record("fused_add_rms_norm", x, residual, list(normalized_shape), weight, eps)
        assert list(normalized_shape) == [x.shape[-1]] == list(weight.shape)
        total = x.float() + residual.float()
        rrms = torch.rsqrt(total.pow(2).mean(-1, keepdim=True) + eps)
        x.copy_((total * rrms * weight.float()).to(x.dtype))
        residual.copy_(total.to(residual.dtype))
        return x, residual

    def apply_rotary_pos_emb(
        self, q, k, cos, sin, position_ids=None, rotary_interleaved=False, inplace=False
    ):
        self._record(
            "apply_rotary_pos_emb",
            q,
            k,
            cos,
            sin,
            position_ids,
            rotary_interleaved,
            inplace=inplace,
        )
        assert k.shape[-1] == q.shape[-1] and cos.shape[-1] == sin.shape[-1]
        assert cos.shape[-1] * 2 == q.shape[-1]
        assert cos.stride(-1) == 1 and sin.stride(-1) == 1
        assert q.shape[:-2] == k.shape[:-2] and position_ids.shape == q.shape[:-2]
        c = cos[position_ids].unsqueeze(-2).float()
        s = sin[position_ids].unsqueeze(-2).float()

        def rotate(x):
            x = x.float()
            if rotary_interleaved:
                x0, x1 = x[..., ::2], x[..., 1::2]
                return torch.stack((x0 * c - x1 * s, x1 * c + x0 * s), -1).flatten(-2)
            x0, x1 = x.chunk(2, dim=-1)
            return torch.cat((x0 * c - x1 * s, x1 * c + x0 * s), dim=-1)

        if inplace:
            q_rot, k_rot = rotate(q).to(q.dtype), rotate(k).to(k.dtype)
            return q.copy_(q_rot), k.copy_(k_rot)
        return rotate(q).to(q.dtype), rotate(k).to(k.dtype)

    def flash_attn_varlen_func(
        self,
        *,
        q,
        k,
        v,
        max_seqlen_q,
        cu_seqlens_q,
        max_seqlen_k,
        seqused_k,
        softmax_scale,
        causal,
        window_size,
        softcap,
        block_table,
        out,
    ):
        """FlagGems' paged FlashAttention-2 addressing: token t of a sequence is at cache row
        block_table[t // block_size] * block_size + t % block_size, that row times k.stride(1)
        from the cache's start; the causal mask aligned to the bottom right."""
        self._record("flash_attn_varlen_func", q, k, v, block_table, window_size, softcap)
        assert window_size == (-1, -1) and softcap == 0.0  # what the tests below pass
        _, block_size, kv_heads, head_size = k.shape
        rows = block_table.max().item() * block_size + block_size
        starts = cu_seqlens_q.tolist()
        for i, kv_len in enumerate(seqused_k.tolist()):
            index = torch.arange(kv_len)
            row = block_table[i, index // block_size].long() * block_size + index % block_size
            keys, values = (
                c.as_strided((rows, kv_heads, head_size), (c.stride(1), c.stride(2), 1))[row]
                for c in (k, v)
            )
            query = q[starts[i] : starts[i + 1]].float()
            group = q.shape[1] // kv_heads
            scores = (
                torch.einsum("qhd,khd->hqk", query, keys.float().repeat_interleave(group, dim=1))
                * softmax_scale
            )
            if causal:
                position = torch.arange(kv_len - len(query), kv_len)[:, None]
                scores = scores.masked_fill(index[None, :] > position, float("-inf"))
            probs = scores.softmax(dim=-1)
            attended = torch.einsum(
                "hqk,khd->qhd", probs, values.float().repeat_interleave(group, dim=1)
            )
            out[starts[i] : starts[i + 1]] = attended.to(out.dtype)

    def reshape_and_cache_flash(
        self, key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale
    ):
        """FlagGems' addressing: a token lands at block * block_stride + offset * heads *
        head_size + head * head_size of the caches' storage (dense blocks assumed)."""
        self._record("reshape_and_cache_flash", key, value, key_cache, value_cache, slot_mapping)
        assert key_cache.stride(0) == value_cache.stride(0)
        _, block_size, heads, head_size = key_cache.shape
        row = heads * head_size
        for token, slot in enumerate(slot_mapping.tolist()):
            if slot < 0:
                continue
            start = (slot // block_size) * key_cache.stride(0) + (slot % block_size) * row
            for src, cache in ((key, key_cache), (value, value_cache)):
                flat = cache.as_strided((row,), (1,), cache.storage_offset() + start)
                flat.copy_(src[token].reshape(row))


def _forget_flag_gems() -> None:
    """Clear what the kernel library cached of the flag_gems it saw (launch plans of its kernels,
    its functions): a real FlagGems loaded by an earlier test in this process must not answer for
    the stub, nor the stub for a real one in a later test."""
    for name, module in list(sys.modules.items()):
        if name.startswith("vllm_fl.kernels"):
            for value in list(vars(module).values()):
                if callable(getattr(value, "cache_clear", None)):
                    value.cache_clear()


@pytest.fixture
def flag_gems(monkeypatch):
    fake = FakeFlagGems()
    _forget_flag_gems()
    monkeypatch.setitem(sys.modules, "flag_gems", fake)
    # the kernel library's module built from a real FlagGems' pointwise_dynamic at import, and
    # that FlagGems' submodules: imported again, they find the stub (which has none), as on a
    # machine without that FlagGems
    for name in [n for n in sys.modules if n.startswith("flag_gems.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delitem(sys.modules, "vllm_fl.kernels.pointwise_kernels", raising=False)
    yield fake
    _forget_flag_gems()


def _close(actual, expected):
    torch.testing.assert_close(actual, expected, **TOLERANCES[expected.dtype])


def _names(fake):
    return [c[0] for c in fake.calls]


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_and_mul_calls_swiglu_on_the_whole_row_stubbed(flag_gems, dtype):
    x = torch.randn(2, 3, 256, dtype=dtype)
    with unchanged(x):
        out = activation.silu_and_mul(None, x)
    assert _names(flag_gems) == ["swiglu"] and flag_gems.calls[0][1][0] is x
    assert_fresh(out, x)
    _close(out, ref_act.silu_and_mul(None, x))


@pytest.mark.parametrize("dtype", DTYPES)
def test_mul_and_silu_gates_the_second_half_stubbed(flag_gems, dtype):
    x = torch.randn(7, 256, dtype=dtype)
    with unchanged(x):
        out = activation.mul_and_silu(None, x)
    ((name, (a, b), _),) = flag_gems.calls
    assert name == "silu_and_mul"
    assert torch.equal(a, x[..., 128:]) and torch.equal(b, x[..., :128])
    _close(out, ref_act.mul_and_silu(None, x))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_and_mul_passes_approximate_stubbed(flag_gems, dtype, approximate):
    layer = Layer(approximate=approximate)
    x = torch.randn(7, 256, dtype=dtype)
    with unchanged(x):
        out = activation.gelu_and_mul(layer, x)
    ((name, (a, b, mode), _),) = flag_gems.calls
    assert name == "gelu_and_mul" and mode == approximate
    assert torch.equal(a, x[..., :128]) and torch.equal(b, x[..., 128:])
    _close(out, ref_act.gelu_and_mul(layer, x))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["gelu_new", "gelu_fast"])
def test_tanh_gelus_call_gelu_tanh_stubbed(flag_gems, op, dtype):
    x = torch.randn(7, 256, dtype=dtype)
    with unchanged(x):
        out = getattr(activation, op)(None, x)
    assert flag_gems.calls == [("gelu", (x,), {"approximate": "tanh"})]
    _close(out, getattr(ref_act, op)(None, x))


@pytest.mark.parametrize("dtype", DTYPES)
def test_quick_gelu_composes_pointwise_kernels_stubbed(flag_gems, dtype):
    x = torch.randn(7, 256, dtype=dtype)
    with unchanged(x):
        out = activation.quick_gelu(None, x)
    assert _names(flag_gems) == ["mul", "sigmoid", "mul"]
    assert_fresh(out, x)
    _close(out, ref_act.quick_gelu(None, x))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["rms_norm", "gemma_rms_norm"])
@pytest.mark.parametrize("weight_dtype", ["same", torch.float32])
@pytest.mark.parametrize("with_residual", [False, True], ids=["x", "x+residual"])
def test_rms_norms_call_out_of_place_rms_norm_stubbed(
    flag_gems, op, dtype, weight_dtype, with_residual
):
    weight = torch.randn(256, dtype=dtype if weight_dtype == "same" else weight_dtype)
    layer = Layer(weight=weight, variance_epsilon=1e-5)
    x = torch.randn(7, 256, dtype=dtype)
    residual = torch.randn(7, 256, dtype=dtype) if with_residual else None
    with unchanged(x, residual, weight):
        out = getattr(normalization, op)(layer, x, residual)
    ((name, args, _),) = flag_gems.calls
    assert name == "rms_norm" and args[1] == [256] and args[3] == 1e-5
    if op == "gemma_rms_norm":
        assert args[2].dtype == torch.float32, "Gemma's (1 + w) stays in float32"
    assert isinstance(out, tuple) == with_residual
    assert_fresh(out, x, residual, weight)
    expected = getattr(ref_norm, op)(layer, x, residual)
    if with_residual:
        assert args[0] is out[1], "the sum is what gets normalised"
        _close(out[0], expected[0])
        _close(out[1], expected[1])
    else:
        assert args[0] is x
        _close(out, expected)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("rotary_dim", [64, 32])
@pytest.mark.parametrize("with_key", [True, False], ids=["key", "key=None"])
def test_rotary_embedding_calls_apply_rotary_pos_emb_stubbed(
    flag_gems, dtype, is_neox, rotary_dim, with_key
):
    cache = cos_sin_cache(512, rotary_dim)
    layer = Layer(cos_sin_cache=cache, head_size=64, rotary_dim=rotary_dim, is_neox_style=is_neox)
    positions = torch.randint(0, 512, (7,))
    query = torch.randn(7, 256, dtype=dtype)
    key = torch.randn(7, 128, dtype=dtype) if with_key else None
    with unchanged(positions, query, key, cache):
        out = rotary.rotary_embedding(layer, positions, query, key)
    ((name, (q, k, cos, sin, pos, interleaved), _),) = flag_gems.calls
    assert name == "apply_rotary_pos_emb" and interleaved is (not is_neox)
    assert cos.dtype == dtype and q.shape == (7, 4, rotary_dim)
    assert k.shape == ((7, 2, rotary_dim) if with_key else (7, 1, rotary_dim))
    assert isinstance(out, tuple) and len(out) == 2 and (out[1] is None) == (key is None)
    assert out[0].shape == query.shape
    assert_fresh(out, positions, query, key, cache)
    expected = ref_rotary.rotary_embedding(layer, positions, query, key)
    _close(out[0], expected[0])
    if key is not None:
        _close(out[1], expected[1])


# -- the in-place eager variants (ops.yaml `eager`), run outside torch.compile ---------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("contiguous", [True, False], ids=["contiguous", "strided"])
@pytest.mark.parametrize("with_residual", [False, True], ids=["x", "x+residual"])
def test_rms_norm_inplace_calls_fused_add_rms_norm_stubbed(
    flag_gems, dtype, contiguous, with_residual
):
    weight = torch.randn(256, dtype=dtype)
    layer = Layer(weight=weight, variance_epsilon=1e-5)
    x = torch.randn(7, 256, dtype=dtype) if contiguous else torch.randn(7, 512, dtype=dtype)[:, ::2]
    residual = torch.randn(7, 256, dtype=dtype) if with_residual else None
    expected = ref_norm.rms_norm(layer, x, residual)
    x0 = x.clone()
    with unchanged(weight):
        out = normalization.rms_norm_inplace(layer, x, residual)
    assert isinstance(out, tuple) == with_residual
    if with_residual and contiguous:
        ((name, args, _),) = flag_gems.calls
        assert name == "fused_add_rms_norm" and args[0] is x and args[1] is residual
        assert args[2] == [256] and args[4] == 1e-5
        assert out[0] is x and out[1] is residual
    else:  # the functional path: out-of-place rms_norm, nothing overwritten
        assert _names(flag_gems) == ["rms_norm"]
        assert torch.equal(x, x0)
        assert_fresh(out, x, residual, weight)
    for a, b in zip(out, expected) if with_residual else [(out, expected)]:
        _close(a, b)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("rotary_dim", [64, 32])
@pytest.mark.parametrize("with_key", [True, False], ids=["key", "key=None"])
def test_rotary_embedding_inplace_stubbed(flag_gems, dtype, is_neox, rotary_dim, with_key):
    cache = cos_sin_cache(512, rotary_dim)
    layer = Layer(cos_sin_cache=cache, head_size=64, rotary_dim=rotary_dim, is_neox_style=is_neox)
    positions = torch.randint(0, 512, (7,))
    query = torch.randn(7, 256, dtype=dtype)
    key = torch.randn(7, 128, dtype=dtype) if with_key else None
    expected = ref_rotary.rotary_embedding(layer, positions, query, key)
    query0 = query.clone()
    with unchanged(positions, cache):
        out = rotary.rotary_embedding_inplace(layer, positions, query, key)
    ((name, (q, k, cos, sin, pos, interleaved), kwargs),) = flag_gems.calls
    assert name == "apply_rotary_pos_emb" and interleaved is (not is_neox)
    in_place = with_key and rotary_dim == 64
    assert kwargs["inplace"] is in_place
    assert (out[1] is None) == (key is None) and out[0].shape == query.shape
    if in_place:  # rotated in the storage of query and key
        assert out[0].data_ptr() == query.data_ptr() and out[1].data_ptr() == key.data_ptr()
        _close(query, expected[0])
        _close(key, expected[1])
    else:  # without a key or with a partial rotary dim: the functional path
        assert torch.equal(query, query0)
        assert_fresh(out, positions, query, key, cache)
    _close(out[0], expected[0])
    if with_key:
        _close(out[1], expected[1])


def test_rotary_embedding_inplace_without_the_flag_is_functional_stubbed(flag_gems):
    """FlagGems releases whose apply_rotary_pos_emb has no ``inplace`` take the functional path."""
    full = flag_gems.apply_rotary_pos_emb

    def old_rope(q, k, cos, sin, position_ids=None, rotary_interleaved=False):
        return full(q, k, cos, sin, position_ids, rotary_interleaved)

    flag_gems.apply_rotary_pos_emb = old_rope
    layer = Layer(
        cos_sin_cache=cos_sin_cache(512, 64), head_size=64, rotary_dim=64, is_neox_style=True
    )
    positions = torch.randint(0, 512, (7,))
    query, key = torch.randn(7, 256), torch.randn(7, 128)
    with unchanged(positions, query, key):
        out = rotary.rotary_embedding_inplace(layer, positions, query, key)
    assert_fresh(out, positions, query, key)
    expected = ref_rotary.rotary_embedding(layer, positions, query, key)
    _close(out[0], expected[0])
    _close(out[1], expected[1])


def test_attention_backend_is_the_plugins():
    assert attention.attention_backend() == "vllm_fl.attention.backend.AttentionBackendFL"
    assert attention.attention_backend(use_mla=True) == "vllm_fl.attention.mla.backend.MLABackendFL"


def _vllm_0_24_caches(blocks=6, block_size=16, heads=2, head_size=64, dtype=torch.float16):
    """Key and value caches as vLLM 0.24 hands them: halves of [blocks, 2, block_size, ...]."""
    return torch.randn(blocks, 2, block_size, heads, head_size).to(dtype).unbind(1)


def _vllm_0_32_caches(blocks=6, block_size=16, heads=2, head_size=64, dtype=torch.float16):
    """As vLLM 0.32 hands them: views of [blocks, heads, block_size, 2 * head_size]."""
    combined = torch.randn(blocks, heads, block_size, 2 * head_size).to(dtype)
    return combined.transpose(1, 2).split(head_size, dim=-1)


def test_reshape_and_cache_flash_writes_vllm_0_24_caches_with_flag_gems(flag_gems):
    key_cache, value_cache = _vllm_0_24_caches()
    key, value = torch.randn(9, 2, 64).half(), torch.randn(9, 2, 64).half()
    slots = torch.tensor([37, 5, -1, 80, 17, 2, 95, -1, 64])
    expected = [key_cache.clone(), value_cache.clone()]
    ref_attention.reshape_and_cache_flash(key, value, *expected, slots[:7])
    with unchanged(key, value, slots):
        attention.reshape_and_cache_flash(key, value, key_cache, value_cache, slots[:7])
    assert _names(flag_gems) == ["reshape_and_cache_flash"]
    assert torch.equal(key_cache, expected[0]) and torch.equal(value_cache, expected[1])


def test_flag_gems_cache_write_only_where_its_addressing_fits():
    key = torch.randn(9, 2, 64)
    assert kernels_attention.dense_blocks(key, *_vllm_0_24_caches())
    assert kernels_attention.dense_blocks(key, *torch.randn(2, 6, 16, 2, 64))
    # a head's values after its keys (0.32), or heads outermost in a block (HND)
    assert not kernels_attention.dense_blocks(key, *_vllm_0_32_caches())
    hnd = torch.randn(6, 2, 2, 16, 64).permute(0, 1, 3, 2, 4).unbind(1)
    assert not kernels_attention.dense_blocks(key, *hnd)
    # a key whose head_size elements are not contiguous
    strided_key = torch.randn(9, 64, 2).transpose(1, 2)
    assert not kernels_attention.dense_blocks(strided_key, *_vllm_0_24_caches())


def test_adapters_carry_the_eager_variants():
    from vllm_fl.backends.flaggems import register_ops

    assert register_ops.rms_norm.eager is normalization.rms_norm_inplace
    assert register_ops.rms_norm.functional is normalization.rms_norm
    assert register_ops.rotary_embedding.eager is rotary.rotary_embedding_inplace
    assert register_ops.rotary_embedding.functional is rotary.rotary_embedding


def _prefill_batch(key_cache, heads=4):
    """A prefill with context, a fresh prefill and a decode over `key_cache`'s pages."""
    blocks, block_size, kv_heads, head_size = key_cache.shape
    seq_lens = torch.tensor([40, 9, 23], dtype=torch.int32)
    query_lens = [7, 9, 1]
    starts = torch.tensor([0, 7, 16, 17], dtype=torch.int32)
    block_table = torch.randperm(blocks)[:9].reshape(3, 3).int()
    query = torch.randn(sum(query_lens), heads, head_size).to(key_cache.dtype)
    return query, block_table, seq_lens, starts, max(query_lens), int(seq_lens.max())


def _kernel_calls(monkeypatch, fake):
    unified = []
    monkeypatch.setattr(kernels_attention, "_on_gpu", lambda tensor: True)
    monkeypatch.setattr(kernels_attention, "unified_attention", lambda *a: unified.append(a))
    return unified


@pytest.mark.parametrize("layout", ["vllm-0.24", "dense"])
def test_paged_attention_runs_prefills_on_flag_gems_with_the_block_table_spread_to_its_pages(
    flag_gems, monkeypatch, layout
):
    if layout == "vllm-0.24":
        key_cache, value_cache = _vllm_0_24_caches(blocks=10, heads=2, dtype=torch.bfloat16)
    else:
        key_cache, value_cache = torch.randn(2, 10, 16, 2, 64).bfloat16().unbind(0)
    unified = _kernel_calls(monkeypatch, flag_gems)
    query, table, seq_lens, starts, max_q, max_k = _prefill_batch(key_cache)
    args = (table, seq_lens, starts, max_q, max_k, 0.125, True, -1, 0.0, None)
    expected = torch.zeros_like(query)
    ref_attention_out = ref_attention.paged_attention(
        query, key_cache, value_cache, expected, *args
    )
    output = torch.zeros_like(query)
    with unchanged(query, key_cache, value_cache, table):
        attention.paged_attention(query, key_cache, value_cache, output, *args)
    assert _names(flag_gems) == ["flash_attn_varlen_func"] and not unified
    pages = flag_gems.calls[0][1][3]
    assert torch.equal(pages, table * (2 if layout == "vllm-0.24" else 1))
    _close(output, ref_attention_out if ref_attention_out is not None else expected)


def test_paged_attention_keeps_vllms_kernel_for_decodes_sinks_float32_and_other_layouts(
    flag_gems, monkeypatch
):
    key_cache, value_cache = _vllm_0_24_caches(blocks=10, heads=2, dtype=torch.bfloat16)
    unified = _kernel_calls(monkeypatch, flag_gems)
    query, table, seq_lens, starts, max_q, max_k = _prefill_batch(key_cache)
    out = torch.zeros_like(query)

    def attend(query=query, caches=(key_cache, value_cache), max_q=max_q, sinks=None):
        args = (table, seq_lens, starts, max_q, max_k, 0.125, True, -1, 0.0, sinks)
        kernels_attention.paged_attention(query, *caches, out, *args)

    attend(max_q=1)  # decodes only
    attend(sinks=torch.zeros(4))
    attend(query=query.float(), caches=(key_cache.float(), value_cache.float()))
    attend(caches=_vllm_0_32_caches(blocks=10, dtype=torch.bfloat16))  # heads not dense
    assert len(unified) == 4 and not flag_gems.calls


@pytest.mark.parametrize("causal, window", [(False, (6, 6)), (True, (6, 0))])
def test_varlen_attention_calls_flag_gems_non_paged_mode_on_the_steps_keys(
    flag_gems, monkeypatch, causal, window
):
    """Encoder-only attention: FlagGems' flash_attn_varlen_func with the sequences' offsets as
    both cu_seqlens (no block table, no seqused_k), the window both ways without causal, the
    soft cap, written into the caller's output."""
    seen = []
    monkeypatch.setattr(flag_gems, "flash_attn_varlen_func", lambda **kw: seen.append(kw))
    q = torch.randn(9, 4, 64, dtype=torch.bfloat16)
    k, v = torch.randn(2, 9, 2, 64, dtype=torch.bfloat16).unbind(0)
    output, starts = torch.zeros_like(q), torch.tensor([0, 4, 9], dtype=torch.int32)
    with unchanged(q, k, v, starts):
        attention.varlen_attention(q, k, v, output, starts, 5, 0.125, causal, 6, 30.0)
    [kw] = seen
    assert kw["q"] is q and kw["k"] is k and kw["v"] is v and kw["out"] is output
    assert kw["cu_seqlens_q"] is starts and kw["cu_seqlens_k"] is starts
    assert kw["max_seqlen_q"] == kw["max_seqlen_k"] == 5
    assert "block_table" not in kw and "seqused_k" not in kw
    assert (kw["causal"], kw["window_size"], kw["softcap"]) == (causal, window, 30.0)


def test_varlen_attention_refuses_float32_for_the_next_backend(flag_gems):
    q = torch.randn(4, 2, 64)
    with pytest.raises(ValueError, match="float16 or bfloat16, got torch.float32"):
        attention.varlen_attention(q, q, q, torch.zeros_like(q), torch.tensor([0, 4]), 4, 0.1)
    assert not flag_gems.calls

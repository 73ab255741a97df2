"""The plugin's attention backend (``vllm_fl.attention``) with the installed vLLM, on the CPU:
what it claims to support, what its impl refuses, the impl's cache write and forward through the
dispatch (the reference here) on the KV-cache layouts of vLLM 0.24 and 0.32, and how the
plugin's platforms select it (``vllm_fl.platform.select_attention_backend``)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch

from vllm_fl import compat

pytestmark = pytest.mark.skipif(not compat.vllm_version(), reason="vLLM is not installed")

HEADS, KV_HEADS, HEAD_SIZE, BLOCK_SIZE, NUM_BLOCKS = 4, 2, 32, 16, 8


@pytest.fixture
def backend_module():
    from vllm_fl.attention import backend

    return backend


def _selector(**overrides):
    from vllm.v1.attention.selector import AttentionSelectorConfig

    fields = dict(head_size=HEAD_SIZE, dtype=torch.float32, kv_cache_dtype="auto", block_size=16)
    fields.update(overrides)
    return AttentionSelectorConfig(**fields)


def _refusals(backend_cls, **overrides) -> list[str]:
    return backend_cls.validate_configuration(
        device_capability=None, **_selector(**overrides)._asdict()
    )


def test_the_backend_names_itself_an_out_of_tree_backend(backend_module):
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    cls = backend_module.AttentionBackendFL
    assert AttentionBackendEnum[cls.get_name()] is AttentionBackendEnum.CUSTOM
    assert cls.get_impl_cls() is backend_module.AttentionImplFL
    assert cls.forward_includes_kv_cache_update is False  # vLLM calls do_kv_cache_update


def test_the_backend_takes_decoder_attention_with_its_features(backend_module):
    cls = backend_module.AttentionBackendFL
    assert _refusals(cls) == []
    assert _refusals(cls, has_sink=True, dtype=torch.bfloat16, kv_cache_dtype="bfloat16") == []


def test_the_backend_takes_encoder_only_attention(backend_module):
    assert _refusals(backend_module.AttentionBackendFL, attn_type="encoder_only") == []


@pytest.mark.parametrize(
    "overrides, reason",
    [
        ({"kv_cache_dtype": "fp8"}, "kv_cache_dtype"),
        ({"dtype": torch.bfloat16, "kv_cache_dtype": "float16"}, "float16 KV cache"),
        ({"use_mla": True}, "MLA"),
        ({"use_mm_prefix": True}, "multimodal"),
        ({"attn_type": "encoder"}, "attention type"),
        ({"attn_type": "encoder_decoder"}, "attention type"),
    ],
)
def test_the_backend_refuses_what_its_ops_do_not_do(backend_module, overrides, reason):
    refusals = _refusals(backend_module.AttentionBackendFL, **overrides)
    assert any(reason in text for text in refusals), refusals


def _impl(backend_module, **kwargs):
    args = dict(
        num_heads=HEADS,
        head_size=HEAD_SIZE,
        scale=HEAD_SIZE**-0.5,
        num_kv_heads=KV_HEADS,
        alibi_slopes=None,
        sliding_window=None,
        kv_cache_dtype="auto",
    )
    args.update(kwargs)
    return backend_module.AttentionImplFL(**args)


@pytest.mark.parametrize(
    "kwargs, named",
    [
        ({"alibi_slopes": [0.5] * HEADS}, "ALiBi"),
        ({"kv_cache_dtype": "fp8"}, "kv_cache_dtype 'fp8'"),
        ({"attn_type": "encoder"}, "attention type 'encoder' (supported: decoder, encoder_only)"),
        (
            {"attn_type": "encoder_only", "sinks": torch.zeros(HEADS)},
            "sinks with encoder-only attention",
        ),
        ({"chunk_lookback": 2}, "chunk_lookback=2"),
        ({"block_m": 64}, "block_m=64"),
    ],
)
def test_the_impl_refuses_what_vllm_does_not_validate(backend_module, kwargs, named):
    with pytest.raises(
        NotImplementedError, match=r"\(AttentionBackendFL\) does not support"
    ) as info:
        _impl(backend_module, **kwargs)
    assert named in str(info.value)


def test_the_impl_takes_vllms_neutral_extras(backend_module):
    impl = _impl(backend_module, sliding_window=8, use_alibi_sqrt=False, chunk_lookback=-1)
    assert impl.window_left == 7  # vLLM's window counts the query itself


def _kv_cache(layout: str, dtype=torch.float32) -> torch.Tensor:
    """An empty KV cache as the running vLLM release hands a Triton-layout layer."""
    if layout == "0.24":
        return torch.zeros(NUM_BLOCKS, 2, BLOCK_SIZE, KV_HEADS, HEAD_SIZE, dtype=dtype)
    # 0.32: [num_blocks, kv_heads, block_size, 2 * head_size] over an NHD (LBNHC) allocation
    physical = torch.zeros(NUM_BLOCKS, BLOCK_SIZE, KV_HEADS, 2 * HEAD_SIZE, dtype=dtype)
    return physical.transpose(1, 2)


@pytest.mark.parametrize("layout", ["0.24", "0.32"])
def test_a_prefill_then_a_decode_through_the_dispatch(backend_module, layout):
    """Two steps of two sequences as vLLM runs them (cache write, then attention), on the
    dispatch's reference, equal the reference attention over the sequences' whole keys."""
    from vllm_fl.backends.reference.impl import attention as reference

    generator = torch.Generator().manual_seed(0)
    sinks = torch.randn(HEADS, generator=generator)
    impl = _impl(backend_module, sliding_window=12, logits_soft_cap=30.0, sinks=sinks)
    kv_cache = _kv_cache(layout)
    block_table = torch.tensor([[5, 2], [7, 0]], dtype=torch.int32)
    keys, values = [], []  # every token's key/value, per sequence, to check against
    for query_lens, seq_lens in (([20, 9], [20, 9]), ([1, 1], [21, 10])):
        tokens = sum(query_lens)
        query = torch.randn(tokens, HEADS, HEAD_SIZE, generator=generator)
        key = torch.randn(tokens + 3, KV_HEADS, HEAD_SIZE, generator=generator)  # padded
        value = torch.randn(tokens + 3, KV_HEADS, HEAD_SIZE, generator=generator)
        slots, start = [], 0
        for seq, (query_len, seq_len) in enumerate(zip(query_lens, seq_lens)):
            for pos in range(seq_len - query_len, seq_len):
                slots.append(
                    int(block_table[seq, pos // BLOCK_SIZE]) * BLOCK_SIZE + pos % BLOCK_SIZE
                )
            if len(keys) <= seq:
                keys.append([]), values.append([])
            keys[seq].append(key[start : start + query_len])
            values[seq].append(value[start : start + query_len])
            start += query_len
        starts = torch.tensor([0, *torch.tensor(query_lens).cumsum(0).tolist()], dtype=torch.int32)
        metadata = SimpleNamespace(
            num_actual_tokens=tokens,
            causal=True,
            block_table=block_table,
            seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
            query_start_loc=starts,
            max_query_len=max(query_lens),
            max_seq_len=max(seq_lens),
        )
        impl.do_kv_cache_update(None, key, value, kv_cache, torch.tensor(slots))
        output = torch.full((tokens + 3, HEADS, HEAD_SIZE), 7.0)
        returned = impl.forward(None, query, key, value, kv_cache, metadata, output)
        assert returned is output
        assert torch.equal(output[tokens:], torch.full((3, HEADS, HEAD_SIZE), 7.0))

    # the second step's outputs from contiguous caches holding each sequence's tokens in order
    contiguous_k = torch.zeros(2, 2 * BLOCK_SIZE, KV_HEADS, HEAD_SIZE)
    contiguous_v = torch.zeros_like(contiguous_k)
    for seq in range(2):
        seq_keys, seq_values = torch.cat(keys[seq]), torch.cat(values[seq])
        contiguous_k[seq, : len(seq_keys)] = seq_keys
        contiguous_v[seq, : len(seq_values)] = seq_values
    expected = torch.empty(2, HEADS, HEAD_SIZE)
    reference.paged_attention(
        query,
        contiguous_k.view(4, BLOCK_SIZE, KV_HEADS, HEAD_SIZE),
        contiguous_v.view(4, BLOCK_SIZE, KV_HEADS, HEAD_SIZE),
        expected,
        torch.tensor([[0, 1], [2, 3]], dtype=torch.int32),
        torch.tensor([21, 10], dtype=torch.int32),
        torch.tensor([0, 1, 2], dtype=torch.int32),
        1,
        21,
        HEAD_SIZE**-0.5,
        window_left=11,
        logits_soft_cap=30.0,
        sinks=sinks,
    )
    torch.testing.assert_close(output[:2], expected)


def _direct_attention(q, k, v, causal: bool, window_left: int, soft_cap: float, scale: float):
    """One sequence's attention written out in float64: every query head against its kv head,
    masks built position by position."""
    length = q.shape[0]
    k = k.repeat_interleave(HEADS // KV_HEADS, dim=1).double()
    scores = torch.einsum("qhd,khd->hqk", q.double(), k) * scale
    if soft_cap > 0:
        scores = soft_cap * torch.tanh(scores / soft_cap)
    for i in range(length):
        for j in range(length):
            hidden = (causal and j > i) or (window_left >= 0 and abs(i - j) > window_left)
            if hidden:
                scores[:, i, j] = float("-inf")
    probs = torch.softmax(scores, dim=-1)
    v = v.repeat_interleave(HEADS // KV_HEADS, dim=1).double()
    return torch.einsum("hqk,khd->qhd", probs, v)


@pytest.mark.parametrize(
    "causal, sliding_window, soft_cap", [(False, None, 0.0), (False, 5, 20.0), (True, None, 0.0)]
)
def test_encoder_only_attention_through_the_dispatch(
    backend_module, monkeypatch, causal, sliding_window, soft_cap
):
    """An encoder-only step of three sequences (vLLM's metadata: query_start_loc, causal false
    from its encoder-only builder), on the dispatch's reference, equals each sequence's
    attention over its own keys; the layer has no KV cache and the cache write writes
    nothing."""
    from vllm.v1.attention.backend import AttentionType

    impl = _impl(
        backend_module,
        sliding_window=sliding_window,
        logits_soft_cap=soft_cap or None,
        attn_type=AttentionType.ENCODER_ONLY,
    )
    generator = torch.Generator().manual_seed(1)
    lens = [11, 1, 17]
    tokens = sum(lens)
    query = torch.randn(tokens + 2, HEADS, HEAD_SIZE, generator=generator)  # padded
    key = torch.randn(tokens + 2, KV_HEADS, HEAD_SIZE, generator=generator)
    value = torch.randn(tokens + 2, KV_HEADS, HEAD_SIZE, generator=generator)
    starts = [0, 11, 12, 29]
    metadata = SimpleNamespace(
        num_actual_tokens=tokens,
        causal=causal,
        query_start_loc=torch.tensor(starts, dtype=torch.int32),
        max_query_len=max(lens),
    )
    no_cache = torch.tensor([])  # what vLLM hands a layer without a KV cache
    impl.do_kv_cache_update(None, key, value, no_cache, torch.arange(tokens))
    paged = []  # the decoder path must not run
    monkeypatch.setattr(backend_module, "paged_attention", lambda *args: paged.append(args))
    output = torch.full((tokens + 2, HEADS, HEAD_SIZE), 7.0)
    assert impl.forward(None, query, key, value, no_cache, metadata, output) is output
    assert not paged
    assert torch.equal(output[tokens:], torch.full((2, HEADS, HEAD_SIZE), 7.0))
    window_left = -1 if sliding_window is None else sliding_window - 1
    for first, last in zip(starts[:-1], starts[1:]):
        expected = _direct_attention(
            query[first:last],
            key[first:last],
            value[first:last],
            causal,
            window_left,
            soft_cap,
            HEAD_SIZE**-0.5,
        )
        torch.testing.assert_close(output[first:last].double(), expected, atol=1e-5, rtol=1e-5)


def test_encoder_only_layers_run_the_varlen_op_through_the_dispatch(backend_module, monkeypatch):
    """The impl's forward reaches the op ``varlen_attention`` by its trampoline and counts the
    call (what the engine's record reports)."""
    from vllm.v1.attention.backend import AttentionType

    seen = []
    monkeypatch.setattr(backend_module, "varlen_attention", lambda *args: seen.append(args))
    before = backend_module.call_counts().get("varlen_attention", 0)
    impl = _impl(backend_module, attn_type=AttentionType.ENCODER_ONLY)
    query = torch.zeros(5, HEADS, HEAD_SIZE)
    starts = torch.tensor([0, 2, 5], dtype=torch.int32)
    metadata = SimpleNamespace(
        num_actual_tokens=5, causal=False, query_start_loc=starts, max_query_len=3
    )
    impl.forward(None, query, query[:, :KV_HEADS], query[:, :KV_HEADS], None, metadata, query)
    [args] = seen
    assert args[4] is starts and args[5] == 3 and args[7] is False
    assert backend_module.call_counts()["varlen_attention"] == before + 1


def test_the_profiling_run_has_no_metadata(backend_module):
    impl = _impl(backend_module)
    output = torch.ones(4, HEADS, HEAD_SIZE)
    impl.forward(None, output, output, output, _kv_cache("0.24"), None, output)
    assert not output.any()


def test_a_kv_cache_of_neither_layout_is_a_clear_error():
    with pytest.raises(ValueError, match=r"KV cache of shape \(8, 2, 16, 40\)"):
        compat.split_kv_cache(torch.zeros(8, 2, 16, 40), HEAD_SIZE)


# -- selection by the plugin's platforms -------------------------------------------------------


class _Platform:
    @classmethod
    def get_device_capability(cls):
        return None


@pytest.fixture
def answer(monkeypatch):
    """`answer(path)`: the dispatch op attention_backend returns ``path``."""
    import vllm_fl.dispatch as dispatch

    def set_answer(path):
        monkeypatch.setattr(dispatch, "call_op", lambda op, **kwargs: path)

    return set_answer


VLLM_DEFAULT = "vllm.v1.attention.backends.cpu_attn.CPUAttentionBackend"


def test_the_platform_takes_the_ops_backend(answer):
    from vllm_fl.attention import PLUGIN_BACKEND
    from vllm_fl.platform import select_attention_backend

    answer(PLUGIN_BACKEND)
    assert select_attention_backend(_Platform, VLLM_DEFAULT, None, _selector()) == PLUGIN_BACKEND


def test_a_backend_the_user_chose_stays(answer):
    from vllm_fl.attention import PLUGIN_BACKEND
    from vllm_fl.platform import select_attention_backend

    answer(PLUGIN_BACKEND)
    chosen = select_attention_backend(_Platform, VLLM_DEFAULT, "CPU_ATTN", _selector())
    assert chosen == VLLM_DEFAULT


def test_vllms_backend_where_the_ops_cannot_run_the_layer(answer, caplog):
    from vllm_fl.attention import PLUGIN_BACKEND
    from vllm_fl.platform import select_attention_backend

    answer(PLUGIN_BACKEND)
    with caplog.at_level(logging.WARNING, logger="vllm_fl.vllm"):
        chosen = select_attention_backend(
            _Platform, VLLM_DEFAULT, None, _selector(kv_cache_dtype="fp8")
        )
    assert chosen == VLLM_DEFAULT
    assert "cannot run this layer (kv_cache_dtype not supported)" in caplog.text


@pytest.mark.parametrize("path", ["", "no_such_module.Backend"])
def test_vllms_backend_where_the_op_names_none_or_nothing_importable(answer, path):
    from vllm_fl.platform import select_attention_backend

    answer(path)
    assert select_attention_backend(_Platform, VLLM_DEFAULT, None, _selector()) == VLLM_DEFAULT


@pytest.mark.skipif(not compat.is_cpu_build(), reason="the plugin's CPU platform: vLLM's CPU build")
def test_the_cpu_platform_selects_the_plugins_backend_through_the_reference(monkeypatch):
    """On the CPU only the reference is available: its attention_backend names the plugin's."""
    from vllm_fl.attention import PLUGIN_BACKEND
    from vllm_fl.dispatch import policy_context
    from vllm_fl.platform.cpu import PlatformFLCpu

    with policy_context(prefer="reference"):
        chosen = PlatformFLCpu.get_attn_backend_cls(None, _selector(block_size=None))
    assert chosen == PLUGIN_BACKEND


@pytest.mark.parametrize("prefer, expected", [("reference", "NEVER"), ("flagos", "ALWAYS")])
def test_cuda_graphs_only_where_the_selected_kernels_can_be_captured(
    backend_module, monkeypatch, prefer, expected
):
    """The reference reads sequence lengths on the host: no CUDA graph may capture it."""
    from vllm.v1.attention.backend import AttentionCGSupport

    from vllm_fl.dispatch import BackendImplKind, get_default_manager

    manager = get_default_manager()
    kind = BackendImplKind.REFERENCE if prefer == "reference" else BackendImplKind.DEFAULT
    selected = SimpleNamespace(kind=kind)
    monkeypatch.setattr(manager, "resolve_candidates", lambda op, traced=False: [selected])
    builder = backend_module.AttentionBackendFL.get_builder_cls()
    assert builder.get_cudagraph_support(None, None) is getattr(AttentionCGSupport, expected)


def test_cuda_graphs_of_encoder_only_layers_ask_the_varlen_op_only(backend_module, monkeypatch):
    """An encoder-only layer's builder (vLLM hands it an EncoderOnlyAttentionSpec) depends on
    varlen_attention's selection alone; a decoder's on the paged ops'."""
    from vllm.v1.attention.backend import AttentionCGSupport
    from vllm.v1.kv_cache_interface import EncoderOnlyAttentionSpec

    from vllm_fl.dispatch import BackendImplKind, get_default_manager

    def resolve(op, traced=False):
        on_reference = op == "varlen_attention"
        kind = BackendImplKind.REFERENCE if on_reference else BackendImplKind.DEFAULT
        return [SimpleNamespace(kind=kind)]

    monkeypatch.setattr(get_default_manager(), "resolve_candidates", resolve)
    spec = EncoderOnlyAttentionSpec(
        block_size=16, num_kv_heads=KV_HEADS, head_size=HEAD_SIZE, dtype=torch.float32
    )
    builder = backend_module.AttentionBackendFL.get_builder_cls()
    assert builder.get_cudagraph_support(None, spec) is AttentionCGSupport.NEVER
    assert builder.get_cudagraph_support(None, None) is AttentionCGSupport.ALWAYS


def test_vllm_keeps_attention_in_its_opaque_custom_ops_on_the_plugins_platforms():
    """vLLM calls the impl's forward and cache write inside ``vllm::unified_attention_with_output``
    and ``vllm::unified_kv_cache_update`` where the platform says attention is opaque: under
    torch.compile each is one node, and the dispatched ops run eagerly inside."""
    from vllm_fl.platform.cpu import PlatformFLCpu

    assert PlatformFLCpu.opaque_attention_op()

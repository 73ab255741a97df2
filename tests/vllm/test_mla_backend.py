"""The plugin's MLA backend (``vllm_fl.attention.mla``) with the installed vLLM, on the CPU.

- The MLA ops' reference against vLLM's own CPU code for the same computation: its CPU MLA
  cache write and decode kernel, its SDPA prefill, its context gather and its PyTorch merge.
- The prefill backend as vLLM's MLA prefill drives it (the new tokens, then each context chunk,
  merged) equals attention over the whole sequence, with the chunk named the way vLLM 0.24
  (``chunk_idx``) and 0.32 (``chunk``) name it.
- The impl's decode and cache write through the dispatch; what the backend claims; how the
  plugin's platforms select it.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch

from vllm_fl import compat
from vllm_fl.attention.mla import MLA_BACKEND
from vllm_fl.backends.reference.impl import mla as reference

pytestmark = pytest.mark.skipif(not compat.vllm_version(), reason="vLLM is not installed")

KV_LORA_RANK, ROPE_DIM = 512, 64  # vLLM's CPU decode kernel is built for this latent only
ENTRY = KV_LORA_RANK + ROPE_DIM
HEADS, NOPE_DIM, V_DIM = 4, 32, 32
BLOCK_SIZE, NUM_BLOCKS = 16, 12
SCALE = (NOPE_DIM + ROPE_DIM) ** -0.5


def _generator() -> torch.Generator:
    return torch.Generator().manual_seed(7)


# -- the reference against vLLM's CPU code -------------------------------------------------------


def _mla_impl(cls):
    """An MLA impl of class `cls` for the test's shape (vLLM's and the plugin's take the same
    arguments)."""
    from vllm.config import VllmConfig, set_current_vllm_config

    with set_current_vllm_config(VllmConfig()):
        return cls(
            num_heads=HEADS,
            head_size=ENTRY,
            scale=SCALE,
            num_kv_heads=1,
            alibi_slopes=None,
            sliding_window=None,
            kv_cache_dtype="auto",
            logits_soft_cap=None,
            attn_type="decoder",
            kv_sharing_target_layer_name=None,
            q_lora_rank=None,
            kv_lora_rank=KV_LORA_RANK,
            qk_nope_head_dim=NOPE_DIM,
            qk_rope_head_dim=ROPE_DIM,
            qk_head_dim=NOPE_DIM + ROPE_DIM,
            v_head_dim=V_DIM,
            kv_b_proj=None,
        )


def _cpu_mla_impl():
    from vllm.v1.attention.backends.mla.cpu_mla import CPUMLAImpl

    return _mla_impl(CPUMLAImpl)


def test_the_cache_write_matches_vllms_cpu_mla():
    gen = _generator()
    kv_c, k_pe = torch.randn(9, KV_LORA_RANK, generator=gen), torch.randn(
        9, 1, ROPE_DIM, generator=gen
    )
    slots = torch.tensor([37, 5, -1, 80, 17, 2, 95, -1, 64])
    expected = torch.zeros(NUM_BLOCKS, BLOCK_SIZE, ENTRY)
    _cpu_mla_impl().do_kv_cache_update(kv_c, k_pe, expected, slots, "auto", torch.ones(1))
    actual = torch.zeros_like(expected)
    reference.concat_and_cache_mla(kv_c, k_pe.squeeze(1), actual, slots, "auto", torch.ones(1))
    assert torch.equal(actual, expected)


def test_the_decode_matches_vllms_cpu_kernel():
    import vllm._custom_ops as ops

    gen = _generator()
    batch = 3
    q = torch.randn(batch, HEADS, ENTRY, generator=gen)
    cache = torch.randn(NUM_BLOCKS, BLOCK_SIZE, ENTRY, generator=gen)
    block_table = torch.tensor([[3, 7, 1], [0, 5, 2], [9, 4, 11]], dtype=torch.int32)
    seq_lens = torch.tensor([40, 1, 17], dtype=torch.int32)
    expected = torch.zeros(batch, HEADS, KV_LORA_RANK)
    ops.mla_decode_kvcache_cpu(expected, q, cache, SCALE, block_table, seq_lens)
    actual, lse = torch.empty_like(expected), torch.empty(batch, HEADS)
    reference.mla_decode_attention(q, cache, actual, lse, block_table, seq_lens, 40, SCALE)
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)


def test_the_prefill_attention_matches_vllms_cpu_sdpa():
    from vllm.v1.attention.backends.mla.prefill.cpu_sdpa import CPUSDPAMLAPrefillBackend

    gen = _generator()
    q = torch.randn(12, HEADS, NOPE_DIM + ROPE_DIM, generator=gen)
    k = torch.randn(46, HEADS, NOPE_DIM + ROPE_DIM, generator=gen)
    v = torch.randn(46, HEADS, V_DIM, generator=gen)
    cu_q = torch.tensor([0, 5, 12], dtype=torch.int32)
    cu_k = torch.tensor([0, 30, 46], dtype=torch.int32)
    vllm_sdpa = SimpleNamespace(scale=SCALE)
    expected_out, expected_lse = CPUSDPAMLAPrefillBackend._ragged_sdpa(
        vllm_sdpa, q, k, v, cu_q, cu_k, causal=False, return_softmax_lse=True
    )
    out, lse = torch.empty(12, HEADS, V_DIM), torch.empty(HEADS, 12)
    reference.mla_prefill_attention(q, k, v, out, lse, cu_q, cu_k, 7, 30, SCALE, False)
    torch.testing.assert_close(out, expected_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse, expected_lse, atol=1e-5, rtol=1e-5)
    # the new tokens' causal self-attention (square per sequence, as vLLM's SDPA takes it)
    expected_causal = CPUSDPAMLAPrefillBackend._ragged_sdpa(
        vllm_sdpa, q, k[:12], v[:12], cu_q, cu_q, causal=True, return_softmax_lse=False
    )
    reference.mla_prefill_attention(q, k[:12], v[:12], out, None, cu_q, cu_q, 7, 7, SCALE, True)
    torch.testing.assert_close(out, expected_causal, atol=1e-5, rtol=1e-5)


def test_the_context_gather_matches_vllms_cpu_gather():
    import vllm._custom_ops as ops

    gen = _generator()
    cache = torch.randn(NUM_BLOCKS, BLOCK_SIZE, ENTRY, generator=gen)
    block_table = torch.tensor([[3, 6, 0], [1, 4, 8]], dtype=torch.int32)
    cu_seq_lens = torch.tensor([0, 21, 30], dtype=torch.int32)
    starts = torch.tensor([5, 16], dtype=torch.int32)
    expected = torch.zeros(40, ENTRY)
    ops.gather_mla_context_cache_cpu(
        src_cache=cache,
        dst=expected,
        block_table=block_table,
        starts=starts,
        cu_seq_lens=cu_seq_lens,
    )
    actual = torch.zeros_like(expected)
    token_to_seq = torch.tensor([0] * 21 + [1] * 9, dtype=torch.int32)
    reference.gather_and_maybe_dequant_cache(
        cache, actual, block_table, cu_seq_lens, token_to_seq, 30, "auto", torch.ones(1), starts
    )
    assert torch.equal(actual, expected)


@pytest.mark.parametrize("with_context", [None, 3], ids=["all-merged", "three-with-context"])
def test_the_merge_matches_vllms_pytorch_merge(with_context):
    from vllm.v1.attention.ops.merge_attn_states import _merge_attn_states_torch

    gen = _generator()
    parts = [torch.randn(7, HEADS, V_DIM, generator=gen) for _ in range(2)]
    lses = [torch.randn(HEADS, 7, generator=gen) for _ in range(2)]
    lses[0][1, 2] = float("inf")  # FlashAttention 2's empty prefix
    expected, expected_lse = torch.empty(7, HEADS, V_DIM), torch.empty(HEADS, 7)
    _merge_attn_states_torch(
        expected, parts[0], lses[0], parts[1], lses[1], expected_lse, with_context
    )
    actual, actual_lse = torch.empty_like(expected), torch.empty_like(expected_lse)
    reference.merge_attn_states(
        actual, parts[0], lses[0], parts[1], lses[1], actual_lse, with_context
    )
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(actual_lse, expected_lse)


def test_the_merge_may_write_over_its_prefix():
    """vLLM 0.32 folds context chunks into a running partial in place."""
    gen = _generator()
    prefix, suffix = (torch.randn(5, HEADS, V_DIM, generator=gen) for _ in range(2))
    prefix_lse, suffix_lse = (torch.randn(HEADS, 5, generator=gen) for _ in range(2))
    expected = torch.empty_like(prefix)
    reference.merge_attn_states(expected, prefix, prefix_lse, suffix, suffix_lse)
    reference.merge_attn_states(prefix, prefix, prefix_lse, suffix, suffix_lse)
    torch.testing.assert_close(prefix, expected)


@pytest.mark.parametrize(
    "call",
    [
        lambda: reference.concat_and_cache_mla(
            torch.zeros(1, 4),
            torch.zeros(1, 2),
            torch.zeros(1, 16, 6, dtype=torch.uint8),
            torch.zeros(1, dtype=torch.int64),
            "fp8",
            torch.ones(1),
        ),
        lambda: reference.merge_attn_states(
            *(torch.zeros(1, 1, 8), torch.zeros(1, 1, 8), torch.zeros(1, 1)),
            torch.zeros(1, 1, 8),
            torch.zeros(1, 1),
            output_scale=torch.ones(1),
        ),
    ],
    ids=["fp8-cache", "fp8-output"],
)
def test_the_reference_names_what_it_does_not_support(call):
    with pytest.raises(ValueError, match="not supported by the reference"):
        call()


# -- the prefill backend as vLLM's MLA prefill drives it ----------------------------------------


def _prefill_backend():
    from vllm.config import VllmConfig

    from vllm_fl.attention.mla.prefill import MLAPrefillBackendFL

    return MLAPrefillBackendFL(
        num_heads=HEADS,
        scale=SCALE,
        kv_lora_rank=KV_LORA_RANK,
        qk_nope_head_dim=NOPE_DIM,
        qk_rope_head_dim=ROPE_DIM,
        v_head_dim=V_DIM,
        vllm_config=VllmConfig(),
    )


@pytest.mark.parametrize("api", ["0.24", "0.32"])
def test_new_tokens_and_a_context_chunk_merged_are_attention_over_the_sequence(api):
    """Two prefills with 20 and 9 cached tokens before their 5 and 7 new ones."""
    from vllm_fl.dispatch import policy_context
    from vllm_fl.backends.reference.impl.mla import merge_attn_states

    gen = _generator()
    context, new = [20, 9], [5, 7]
    dim = NOPE_DIM + ROPE_DIM
    keys = [torch.randn(c + n, HEADS, dim, generator=gen) for c, n in zip(context, new)]
    values = [torch.randn(c + n, HEADS, V_DIM, generator=gen) for c, n in zip(context, new)]
    q = torch.randn(sum(new), HEADS, dim, generator=gen)
    query_start_loc = torch.tensor([0, 5, 12], dtype=torch.int32)
    context_cu = torch.tensor([0, 20, 29], dtype=torch.int32)
    backend = _prefill_backend()
    if api == "0.24":
        chunked = SimpleNamespace(cu_seq_lens=[context_cu], max_seq_lens=[20])
        chunk_args = {"chunk_idx": 0}
    else:
        chunked = None
        chunk = SimpleNamespace(
            query_start_loc=query_start_loc, cu_seq_lens=context_cu, max_query_len=7, max_seq_len=20
        )
        chunk_args = {"chunk": chunk}
    backend.prepare_metadata(
        SimpleNamespace(query_start_loc=query_start_loc, max_query_len=7, chunked_context=chunked)
    )
    k_new = torch.cat([k[c:] for k, c in zip(keys, context)])
    v_new = torch.cat([v[c:] for v, c in zip(values, context)])
    k_ctx = torch.cat([k[:c] for k, c in zip(keys, context)])
    v_ctx = torch.cat([v[:c] for v, c in zip(values, context)])
    with policy_context(prefer="reference"):
        suffix, suffix_lse = backend.run_prefill_new_tokens(
            q, k_new, v_new, return_softmax_lse=True
        )
        prefix, prefix_lse = backend.run_prefill_context_chunk(q=q, k=k_ctx, v=v_ctx, **chunk_args)
    merged = torch.empty_like(suffix)
    merge_attn_states(merged, prefix, prefix_lse, suffix, suffix_lse)

    expected = torch.empty_like(merged)
    full_cu = torch.tensor([0, 25, 41], dtype=torch.int32)
    reference.mla_prefill_attention(
        q,
        torch.cat(keys),
        torch.cat(values),
        expected,
        None,
        query_start_loc,
        full_cu,
        7,
        25,
        SCALE,
        True,
    )
    torch.testing.assert_close(merged, expected, atol=1e-5, rtol=1e-5)


def test_the_prefill_backend_refuses_an_fp8_output():
    backend = _prefill_backend()
    with pytest.raises(NotImplementedError, match="does not write FP8 outputs"):
        backend.run_prefill_new_tokens(
            torch.zeros(1, HEADS, 96),
            torch.zeros(1, HEADS, 96),
            torch.zeros(1, HEADS, V_DIM),
            False,
            output_scale=torch.ones(1),
        )


# -- the backend and its impl --------------------------------------------------------------------


@pytest.fixture
def backend_module():
    from vllm_fl.attention.mla import backend

    return backend


def _selector(**overrides):
    from vllm.v1.attention.selector import AttentionSelectorConfig

    fields = dict(
        head_size=ENTRY, dtype=torch.float32, kv_cache_dtype="auto", block_size=16, use_mla=True
    )
    fields.update(overrides)
    return AttentionSelectorConfig(**fields)


def _refusals(backend_cls, **overrides) -> list[str]:
    return backend_cls.validate_configuration(
        device_capability=None, **_selector(**overrides)._asdict()
    )


def test_the_backend_is_vllms_triton_mla_with_the_plugins_parts(backend_module):
    from vllm.v1.attention.backends.mla.triton_mla import TritonMLABackend
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    cls = backend_module.MLABackendFL
    assert MLA_BACKEND == f"{cls.__module__}.{cls.__qualname__}"
    assert issubclass(cls, TritonMLABackend) and cls.is_mla()
    assert AttentionBackendEnum[cls.get_name()] is AttentionBackendEnum.CUSTOM
    assert cls.get_impl_cls() is backend_module.MLAImplFL
    assert cls.get_builder_cls() is backend_module.MLAMetadataBuilderFL


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_backend_takes_mla_in_the_models_dtype(backend_module, dtype):
    assert _refusals(backend_module.MLABackendFL, dtype=dtype) == []


def test_the_backend_refuses_an_fp8_cache(backend_module):
    refusals = _refusals(backend_module.MLABackendFL, kv_cache_dtype="fp8")
    assert any("kv_cache_dtype" in text for text in refusals), refusals


def _impl(backend_module):
    return _mla_impl(backend_module.MLAImplFL)


def test_a_cache_write_then_a_decode_through_the_dispatch(backend_module):
    """The impl writes two sequences' latents, then decodes their next tokens, as vLLM calls
    it (the query as its latent and rotary parts)."""
    from vllm_fl.dispatch import policy_context

    gen = _generator()
    impl = _impl(backend_module)
    cache = torch.zeros(NUM_BLOCKS, BLOCK_SIZE, ENTRY)
    kv_c = torch.randn(25, KV_LORA_RANK, generator=gen)
    k_pe = torch.randn(25, 1, ROPE_DIM, generator=gen)
    block_table = torch.tensor([[4, 9], [2, 0]], dtype=torch.int32)
    # sequence 0: 17 tokens in blocks 4 and 9; sequence 1: 8 tokens in block 2
    slots = torch.tensor(
        [4 * 16 + i for i in range(16)] + [9 * 16] + [2 * 16 + i for i in range(8)]
    )
    q_nope = torch.randn(2, HEADS, KV_LORA_RANK, generator=gen)
    q_pe = torch.randn(2, HEADS, ROPE_DIM, generator=gen)
    decode = SimpleNamespace(
        block_table=block_table, seq_lens=torch.tensor([17, 8], dtype=torch.int32)
    )
    with policy_context(prefer="reference"):
        impl.do_kv_cache_update(kv_c, k_pe, cache, slots.view(1, -1), "auto", torch.ones(1))
        out, lse = impl.forward_mqa(
            (q_nope, q_pe), cache, SimpleNamespace(decode=decode, max_seq_len=17), None
        )
    entries = torch.cat([kv_c, k_pe.squeeze(1)], dim=-1)
    q = torch.cat([q_nope, q_pe], dim=-1)
    for row, (first, last) in enumerate([(0, 17), (17, 25)]):
        scores = q[row] @ entries[first:last].t() * SCALE
        expected = torch.softmax(scores, dim=-1) @ kv_c[first:last]
        torch.testing.assert_close(out[row], expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(lse[row], torch.logsumexp(scores, dim=-1))


def test_the_profiling_runs_empty_cache_is_left_alone(backend_module):
    impl = _impl(backend_module)
    impl.do_kv_cache_update(
        torch.zeros(2, KV_LORA_RANK),
        torch.zeros(2, 1, ROPE_DIM),
        torch.zeros(0),
        torch.zeros(2),
        "auto",
        None,
    )


# -- selection by the plugin's platforms ---------------------------------------------------------


def test_the_cpu_platform_selects_the_mla_backend_through_the_reference():
    """On the CPU only the reference is available: its attention_backend names the plugin's MLA
    backend for MLA layers."""
    from vllm_fl.dispatch import policy_context
    from vllm_fl.platform.cpu import PlatformFLCpu

    with policy_context(prefer="reference"):
        chosen = PlatformFLCpu.get_attn_backend_cls(None, _selector())
    assert chosen == MLA_BACKEND


def test_vllms_mla_backend_stays_where_the_plugins_cannot_run_the_layer(caplog):
    from vllm_fl.dispatch import policy_context
    from vllm_fl.platform.cpu import PlatformFLCpu

    with policy_context(prefer="reference"), caplog.at_level(logging.WARNING, "vllm_fl.vllm"):
        chosen = PlatformFLCpu.get_attn_backend_cls(None, _selector(kv_cache_dtype="fp8"))
    assert chosen != MLA_BACKEND
    assert f"attention backend {MLA_BACKEND} cannot run this layer" in caplog.text


# -- vLLM's MLA functions routed through the dispatch ----------------------------------------


@pytest.fixture
def hooks(monkeypatch):
    from vllm_fl import functions
    from vllm_fl.dispatch.policy import current as dispatch_policy

    for var in ("VLLM_FL_OOT_BLACKLIST", "VLLM_FL_OOT_WHITELIST", "VLLM_FL_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("VLLM_FL_PREFER", "reference")
    dispatch_policy.reset_global_policy()
    functions._reset_for_tests()
    yield functions
    functions._reset_for_tests()
    monkeypatch.delenv("VLLM_FL_PREFER")
    dispatch_policy.reset_global_policy()


def test_vllms_mla_layer_reaches_the_dispatch_for_its_functions(hooks):
    """vLLM's MLA code calls the cache functions through ``vllm._custom_ops`` and the merge by
    the name it imported: after ``install`` all three are the ops' dispatch."""
    import vllm._custom_ops as ops
    from vllm.model_executor.layers.attention import mla_attention

    sites = hooks.install()
    assert "vllm._custom_ops.concat_and_cache_mla" in sites["concat_and_cache_mla"]
    assert (
        "vllm._custom_ops.gather_and_maybe_dequant_cache" in sites["gather_and_maybe_dequant_cache"]
    )
    assert f"{mla_attention.__name__}.merge_attn_states" in sites["merge_attn_states"]
    assert mla_attention.merge_attn_states is not hooks.original("merge_attn_states")

    gen = _generator()
    kv_c, k_pe = torch.randn(3, KV_LORA_RANK, generator=gen), torch.randn(
        3, ROPE_DIM, generator=gen
    )
    cache = torch.zeros(2, BLOCK_SIZE, ENTRY)
    ops.concat_and_cache_mla(kv_c, k_pe, cache, torch.tensor([17, 3, 16]), "auto", torch.ones(1))
    gathered = torch.zeros(3, ENTRY)
    ops.gather_and_maybe_dequant_cache(
        cache,
        gathered,
        torch.tensor([[0, 1]], dtype=torch.int32),
        torch.tensor([0, 3], dtype=torch.int32),
        torch.zeros(3, dtype=torch.int32),
        3,
        "auto",
        torch.ones(1),
        torch.tensor([15], dtype=torch.int32),
    )
    # positions 15, 16, 17 of the sequence: slots 15 (never written), 16 and 17
    expected = torch.cat([kv_c, k_pe], dim=-1)
    assert not gathered[0].any()
    assert torch.equal(gathered[1], expected[2]) and torch.equal(gathered[2], expected[0])

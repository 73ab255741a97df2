"""The census of vLLM's own kernels: MoE and attention kernels counted apart from the rest, the
layers' own wrappers and everything that is not vLLM's left out."""

from __future__ import annotations

import types

from vllm_fl.testing.census import census


def _event(key: str, count: int):
    return types.SimpleNamespace(key=key, count=count)


def test_vllms_ops_are_counted_moe_and_attention_kernels_apart():
    events = [
        _event("_moe_C::topk_softmax", 4),
        _event("_C::cpu_fused_moe", 8),
        _event("_C::rms_norm", 16),
        _event("_C::cpu_attention_with_kv_cache", 8),
        _event("_C::cpu_attn_reshape_and_cache", 8),
        _event("_C_cache_ops::reshape_and_cache_flash", 2),
        _event("_vllm_fa3_C::fwd", 2),
        # the layers' wrappers: ours runs inside them
        _event("vllm::unified_attention_with_output", 8),
        _event("vllm::unified_kv_cache_update", 8),
        _event("vllm::moe_forward", 8),
        _event("aten::mm", 99),  # not vLLM's
        _event("_C::rms_norm", 2),
    ]
    assert census(events) == {
        "moe": {"_moe_C::topk_softmax": 4, "_C::cpu_fused_moe": 8},
        "attention": {
            "_C::cpu_attention_with_kv_cache": 8,
            "_C::cpu_attn_reshape_and_cache": 8,
            "_C_cache_ops::reshape_and_cache_flash": 2,
            "_vllm_fa3_C::fwd": 2,
        },
        "other": {"_C::rms_norm": 18},
    }

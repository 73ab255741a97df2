"""The census of vLLM's own kernels: MoE kernels counted apart from the rest, the layer's own
wrapper and everything that is not vLLM's left out."""

from __future__ import annotations

import types

from vllm_fl.testing.census import census


def _event(key: str, count: int):
    return types.SimpleNamespace(key=key, count=count)


def test_vllms_ops_are_counted_moe_kernels_apart():
    events = [
        _event("_moe_C::topk_softmax", 4),
        _event("_C::cpu_fused_moe", 8),
        _event("_C::rms_norm", 16),
        _event("vllm::unified_attention_with_output", 8),
        _event("vllm::moe_forward", 8),  # the layer's wrapper: ours runs inside it
        _event("aten::mm", 99),  # not vLLM's
        _event("_C::rms_norm", 2),
    ]
    assert census(events) == {
        "moe": {"_moe_C::topk_softmax": 4, "_C::cpu_fused_moe": 8},
        "other": {"_C::rms_norm": 18, "vllm::unified_attention_with_output": 8},
    }

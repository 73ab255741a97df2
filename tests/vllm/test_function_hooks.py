"""vLLM functions replaced by ops (``function:`` in ops.yaml) are routed through the dispatch.

vLLM's CPU build has no ``_moe_C`` kernels, so its own router (``fused_topk``, which calls
``vllm._custom_ops.topk_softmax``) fails there unless the plugin's hook routes the call to the
dispatch, whose reference implementation then runs.
"""

from __future__ import annotations

import sys
import types

import pytest

pytest.importorskip("vllm")

import torch  # noqa: E402
from vllm_fl import functions  # noqa: E402
from vllm_fl.dispatch.policy import current as dispatch_policy  # noqa: E402
from vllm_fl.backends.reference.impl import moe as reference_moe  # noqa: E402

import vllm._custom_ops as vllm_ops  # noqa: E402


@pytest.fixture
def hooks(monkeypatch):
    for var in ("VLLM_FL_OOT_BLACKLIST", "VLLM_FL_OOT_WHITELIST", "VLLM_FL_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    dispatch_policy.reset_global_policy()
    functions._reset_for_tests()
    yield functions
    functions._reset_for_tests()
    sys.modules.pop("vllm._fl_name_bound_copy", None)
    dispatch_policy.reset_global_policy()


def _route(num_tokens=5, num_experts=16, k=4):
    from vllm.model_executor.layers.fused_moe.router.fused_topk_router import fused_topk

    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(num_tokens, 32, generator=gen)
    logits = torch.randn(num_tokens, num_experts, generator=gen)
    return logits, fused_topk(hidden, logits, k, renormalize=True)


def test_vllms_router_fails_on_cpu_without_the_hook(hooks):
    with pytest.raises((AttributeError, RuntimeError, NotImplementedError)):
        _route()


def test_vllms_router_reaches_the_dispatch_after_install(hooks):
    sites = hooks.install()
    assert "vllm._custom_ops.topk_softmax" in sites["topk_softmax"]
    assert vllm_ops.topk_softmax is not hooks.original("topk_softmax")
    logits, (weights, ids, token_expert_indices) = _route()
    expected = [torch.empty_like(t) for t in (weights, ids, token_expert_indices)]
    reference_moe.topk_softmax(*expected, logits, True)
    torch.testing.assert_close(weights, expected[0])
    assert torch.equal(ids, expected[1])
    assert torch.equal(token_expert_indices, expected[2])


def test_name_bound_copies_are_routed_too(hooks):
    copy = types.ModuleType("vllm._fl_name_bound_copy")
    copy.my_topk_softmax = vllm_ops.topk_softmax  # as `from vllm._custom_ops import ...` binds it
    sys.modules[copy.__name__] = copy
    sites = hooks.install()
    assert "vllm._fl_name_bound_copy.my_topk_softmax" in sites["topk_softmax"]
    assert copy.my_topk_softmax is vllm_ops.topk_softmax
    assert copy.my_topk_softmax is not hooks.original("topk_softmax")


def test_install_is_idempotent(hooks):
    first = hooks.install()
    routed = vllm_ops.topk_softmax
    assert hooks.install() == first
    assert vllm_ops.topk_softmax is routed


def test_blacklisted_function_keeps_vllms(hooks, monkeypatch):
    monkeypatch.setenv("VLLM_FL_OOT_BLACKLIST", "topk_softmax")
    dispatch_policy.reset_global_policy()
    sites = hooks.install()
    assert "topk_softmax" not in sites
    assert vllm_ops.topk_softmax is hooks.original("topk_softmax")
    assert "moe_sum" in sites

"""vLLM's grouped top-k router (DeepSeek-V2/V3) reaches the dispatch op ``grouped_topk`` on a
platform where vLLM itself would compute it in Python (``vllm_fl.grouped_routing``), with the
results of vLLM's own Python routing."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm")

import torch  # noqa: E402
from vllm_fl import grouped_routing  # noqa: E402
from vllm_fl.dispatch import get_default_manager  # noqa: E402
from vllm_fl.dispatch.policy import current as dispatch_policy  # noqa: E402

from vllm.model_executor.layers.fused_moe.router import grouped_topk_router  # noqa: E402

VLLM_GROUPED_TOPK = grouped_topk_router.grouped_topk
#: vLLM's Python routing without its torch.compile wrapper (Inductor would compile it per test)
VLLM_EAGER = getattr(VLLM_GROUPED_TOPK, "_torchdynamo_orig_callable", VLLM_GROUPED_TOPK)


@pytest.fixture
def hook(monkeypatch):
    for var in ("VLLM_FL_OOT_BLACKLIST", "VLLM_FL_OOT_WHITELIST", "VLLM_FL_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("VLLM_USE_FUSED_MOE_GROUPED_TOPK", raising=False)
    dispatch_policy.reset_global_policy()
    grouped_routing._reset_for_tests()
    yield grouped_routing
    grouped_routing._reset_for_tests()
    dispatch_policy.reset_global_policy()


def _router(num_experts=64, groups=8, topk_group=3, topk=6, **kwargs):
    from vllm.model_executor.layers.fused_moe.router.grouped_topk_router import (
        GroupedTopKRouter,
    )

    return GroupedTopKRouter(
        top_k=topk,
        global_num_experts=num_experts,
        num_expert_group=groups,
        topk_group=topk_group,
        **kwargs,
    )


def _by_expert(weights: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A token's experts come in no set order: compare them sorted by expert index."""
    order = ids.to(torch.int64).argsort(dim=-1)
    return weights.gather(-1, order), ids.gather(-1, order)


CASES = [
    # DeepSeek-V3 (noaux_tc): sigmoid, correction bias, renormalised, scaled
    dict(scoring_func="sigmoid", renormalize=True, routed_scaling_factor=2.5, bias=True),
    dict(scoring_func="sigmoid", renormalize=False, routed_scaling_factor=1.0, bias=True),
    dict(scoring_func="softmax", renormalize=True, routed_scaling_factor=1.0, bias=True),
    dict(scoring_func="softmax", renormalize=False, routed_scaling_factor=16.0, bias=True),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['scoring_func']}-{c['renormalize']}")
@pytest.mark.parametrize("num_tokens", [1, 37])
def test_routing_runs_the_op_with_vllms_results(hook, case, num_tokens, monkeypatch):
    assert hook.install()
    assert hook.installed()
    calls = []
    op = hook.grouped_topk_op
    monkeypatch.setattr(hook, "grouped_topk_op", lambda *a: calls.append(a) or op(*a))
    gen = torch.Generator().manual_seed(num_tokens)
    logits = torch.randn(num_tokens, 64, generator=gen)
    bias = torch.randn(64, generator=gen) * 0.1
    router = _router(
        renormalize=case["renormalize"],
        scoring_func=case["scoring_func"],
        routed_scaling_factor=case["routed_scaling_factor"],
        e_score_correction_bias=bias,
    )
    weights, ids = router._compute_routing(torch.randn(num_tokens, 16), logits, None)
    assert len(calls) == 1
    assert calls[0][-1] == (1 if case["scoring_func"] == "sigmoid" else 0)
    assert weights.dtype == torch.float32 and ids.dtype == torch.int32
    expected = VLLM_EAGER(
        torch.randn(num_tokens, 16),
        logits,
        6,
        case["renormalize"],
        8,
        3,
        case["scoring_func"],
        case["routed_scaling_factor"],
        bias,
    )
    got_w, got_ids = _by_expert(weights, ids)
    exp_w, exp_ids = _by_expert(*expected)
    assert torch.equal(got_ids, exp_ids)
    torch.testing.assert_close(got_w, exp_w)


def test_the_op_runs_the_selected_impl(hook):
    hook.install()
    router = _router(scoring_func="sigmoid", e_score_correction_bias=torch.zeros(64))
    router._compute_routing(torch.randn(3, 16), torch.randn(3, 64), None)
    assert get_default_manager().used_impls()["grouped_topk"] == "reference.torch"


def _spy_on_vllm(monkeypatch) -> list:
    calls: list = []
    monkeypatch.setattr(
        grouped_routing, "_vllm_grouped_topk", lambda *a: calls.append(a) or VLLM_EAGER(*a)
    )
    return calls


@pytest.mark.parametrize(
    "kwargs",
    [
        # DeepSeek-V2 (group_limited_greedy): no correction bias, groups scored by their best
        dict(scoring_func="softmax"),
        # more groups than vLLM's fused kernel takes
        dict(num_experts=128, groups=64, topk_group=4, e_score_correction_bias=torch.zeros(128)),
    ],
    ids=["no-bias", "64-groups"],
)
def test_what_vllms_kernel_would_not_take_stays_vllms(hook, monkeypatch, kwargs):
    hook.install()
    calls = _spy_on_vllm(monkeypatch)
    monkeypatch.setattr(hook, "grouped_topk_op", None)  # the op must not be called
    router = _router(**kwargs)
    experts = kwargs.get("num_experts", 64)
    weights, ids = router._compute_routing(torch.randn(5, 16), torch.randn(5, experts), None)
    assert len(calls) == 1
    assert ids.shape == (5, 6) and ids.dtype == torch.int32


def test_vllms_switch_and_the_oot_blacklist_keep_vllms_function(hook, monkeypatch):
    monkeypatch.setenv("VLLM_USE_FUSED_MOE_GROUPED_TOPK", "0")
    assert not hook.install()
    assert grouped_topk_router.grouped_topk is VLLM_GROUPED_TOPK
    monkeypatch.delenv("VLLM_USE_FUSED_MOE_GROUPED_TOPK")
    monkeypatch.setenv("VLLM_FL_OOT_BLACKLIST", "grouped_topk")
    dispatch_policy.reset_global_policy()
    assert not hook.install()
    assert grouped_topk_router.grouped_topk is VLLM_GROUPED_TOPK


def test_install_is_idempotent_and_reversible(hook):
    assert hook.install() and hook.install()
    assert grouped_topk_router.grouped_topk is hook.grouped_topk
    assert hook._vllm_grouped_topk is VLLM_GROUPED_TOPK
    hook._reset_for_tests()
    assert grouped_topk_router.grouped_topk is VLLM_GROUPED_TOPK

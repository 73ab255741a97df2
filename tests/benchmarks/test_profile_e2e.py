"""profile_e2e's accounting: host time by origin and the heaviest functions, per engine step."""

from __future__ import annotations

import pytest

import profile_e2e


def test_vllms_own_python_is_told_apart_from_ours_and_torchs():
    assert profile_e2e.origin("/site/vllm/v1/engine/core.py", "step") == "vllm"
    assert profile_e2e.origin("/site/vllm_fl/dispatch/manager.py", "call") == "vllm_fl"
    assert profile_e2e.origin("/site/torch/nn/modules/module.py", "_call_impl") == "torch"
    assert profile_e2e.origin("~", "<built-in method rms_norm of PyCapsule>") == "C: other"


def test_host_time_is_summed_by_origin_and_divided_by_steps():
    stats = {
        ("/site/vllm/worker.py", 10, "execute"): (1, 1, 0.004, 0.01, {}),
        ("/site/vllm/worker.py", 20, "prepare"): (1, 1, 0.002, 0.002, {}),
        ("/site/vllm_fl/impl/norm.py", 5, "rms_norm"): (1, 1, 0.008, 0.008, {}),
    }
    by_origin, top, ours = profile_e2e.host_split(stats, steps=2)
    assert by_origin == {"vllm": 3.0, "vllm_fl": 4.0}
    assert top[0] == ["norm.py:5(rms_norm)", 4.0, 4.0, 0.5]
    assert top[-1] == ["worker.py:20(prepare)", 1.0, 1.0, 0.5]
    assert ours == [["norm.py:5(rms_norm)", 4.0, 4.0, 0.5]]


def test_every_ab_policy_is_a_valid_policy_change():
    from vllm_fl.dispatch.policy import policy_context

    for name, changes in profile_e2e.AB_POLICIES.items():
        with policy_context(**changes) as policy:
            assert policy.prefer == changes["prefer"], name


def test_ab_rounds_pair_each_policy_with_prefer_vendor_of_the_same_round(monkeypatch):
    """A host that halves its speed after the first round: the medians mislead, the ratios
    taken round by round do not."""
    from argparse import Namespace

    from vllm_fl.dispatch.policy import get_policy

    order: list[str] = []
    host = iter([1.0] * 2 * len(profile_e2e.AB_POLICIES) + [2.0] * 99)

    def step_ms(llm, batch, params, steps):
        policy = get_policy()
        order.append(repr(policy))
        cost = 11.0 if policy.prefer == "flagos" else 10.0
        return cost * next(host)

    monkeypatch.setattr(profile_e2e, "_engine", lambda *a: (None, None, lambda: None))
    monkeypatch.setattr(profile_e2e, "_step_ms", step_ms)
    result = profile_e2e.ab_config(
        "model", Namespace(ab_rounds=3, output_len=8, ab_policies=None, ab_checks=False)
    )
    assert result["samples"]["prefer=vendor"] == [10.0, 20.0, 20.0]
    assert result["samples"]["prefer=flagos"] == [11.0, 22.0, 22.0]
    assert result["paired_ratio"]["prefer=flagos"] == 1.1
    assert result["paired_ratio_range"]["prefer=vendor"] == [1.0, 1.0]
    n = len(profile_e2e.AB_POLICIES)
    assert order[n : 2 * n] == order[2 * n : 3 * n][::-1]  # every other round reversed


def test_ab_policies_name_a_subset_with_prefer_vendor(capsys):
    with pytest.raises(SystemExit):
        profile_e2e.main(["--ab", "--ab-policies", "prefer=flagos"])
    assert "prefer=vendor missing" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        profile_e2e.main(["--ab", "--ab-policies", "prefer=vendor,prefer=nothing"])
    assert "prefer=nothing" in capsys.readouterr().err


def test_slow_path_counter_counts_flag_gems_entries_and_plan_misses(monkeypatch):
    import sys
    import types

    from vllm_fl.dispatch.backends.flaggems import launch

    fake = types.ModuleType("flag_gems")

    def rms_norm(x):
        return x + 1

    fake.rms_norm = rms_norm
    monkeypatch.setitem(sys.modules, "flag_gems", fake)
    monkeypatch.setattr(launch.KernelPlans, "_first_launch", lambda self, *a: (None, {}))
    first_launch = launch.KernelPlans._first_launch
    with profile_e2e._slow_path_counter() as counts:
        assert fake.rms_norm(1) == 2
        assert fake.rms_norm(2) == 3
        assert launch.KernelPlans._first_launch(None, (1,), (), {}) == (None, {})
    assert counts == {"flag_gems.rms_norm": 2, "plan miss": 1}
    assert fake.rms_norm is rms_norm  # restored
    assert launch.KernelPlans._first_launch is first_launch

"""The policy designs (policies compared inside one engine) and the engine profile's accounting:
host time by origin and the heaviest functions, per engine step."""

from __future__ import annotations

import pytest

from benchmarks import e2e_policies, profile_engine
from benchmarks.timing import bootstrap_median_ci
from vllm_fl.testing.engine import Workload


def test_vllms_own_python_is_told_apart_from_ours_and_torchs():
    assert profile_engine.origin("/site/vllm/v1/engine/core.py", "step") == "vllm"
    assert profile_engine.origin("/site/vllm_fl/dispatch/manager.py", "call") == "vllm_fl"
    assert profile_engine.origin("/site/torch/nn/modules/module.py", "_call_impl") == "torch"
    assert profile_engine.origin("~", "<built-in method rms_norm of PyCapsule>") == "C: other"


def test_host_time_is_summed_by_origin_and_divided_by_steps():
    stats = {
        ("/site/vllm/worker.py", 10, "execute"): (1, 1, 0.004, 0.01, {}),
        ("/site/vllm/worker.py", 20, "prepare"): (1, 1, 0.002, 0.002, {}),
        ("/site/vllm_fl/impl/norm.py", 5, "rms_norm"): (1, 1, 0.008, 0.008, {}),
    }
    by_origin, top, ours = profile_engine.host_split(stats, steps=2)
    assert by_origin == {"vllm": 3.0, "vllm_fl": 4.0}
    assert top[0] == ["norm.py:5(rms_norm)", 4.0, 4.0, 0.5]
    assert top[-1] == ["worker.py:20(prepare)", 1.0, 1.0, 0.5]
    assert ours == [["norm.py:5(rms_norm)", 4.0, 4.0, 0.5]]


def test_every_ab_policy_is_a_valid_policy_change():
    from vllm_fl.dispatch.policy.current import policy_context

    for name, changes in e2e_policies.AB_POLICIES.items():
        with policy_context(**changes) as policy:
            assert policy.prefer == changes["prefer"], name


def test_ab_rounds_pair_each_policy_with_prefer_vendor_of_the_same_round(monkeypatch):
    """A host that halves its speed after the first round: the medians mislead, the ratios
    taken round by round do not."""
    from vllm_fl.dispatch.policy.current import get_policy

    order: list[str] = []
    host = iter([1.0] * 2 * len(e2e_policies.AB_DEFAULT) + [2.0] * 99)

    def step_ms(llm, batch, params, steps):
        policy = get_policy()
        order.append(repr(policy))
        cost = 11.0 if policy.prefer == "flagos" else 10.0
        return cost * next(host)

    monkeypatch.setattr(e2e_policies, "fresh_batches", lambda w: (None, lambda: None))
    monkeypatch.setattr(e2e_policies, "step_ms", step_ms)
    workload = Workload(max_tokens=8, task_options={"rounds": 3, "policies": None})
    result = e2e_policies.rounds_task(None, workload)
    assert result["samples"]["prefer=vendor"] == [10.0, 20.0, 20.0]
    assert result["samples"]["prefer=flagos"] == [11.0, 22.0, 22.0]
    assert result["paired_ratio"]["prefer=flagos"] == 1.1
    assert result["paired_ratio_range"]["prefer=vendor"] == [1.0, 1.0]
    n = len(e2e_policies.AB_DEFAULT)
    assert order[n : 2 * n] == order[2 * n : 3 * n][::-1]  # every other round reversed


def test_slow_path_counter_counts_flag_gems_entries_and_plan_misses(monkeypatch):
    import sys
    import types

    from vllm_fl.kernels import launch

    fake = types.ModuleType("flag_gems")

    def rms_norm(x):
        return x + 1

    fake.rms_norm = rms_norm
    monkeypatch.setitem(sys.modules, "flag_gems", fake)
    monkeypatch.setattr(launch.KernelPlans, "_first_launch", lambda self, *a: (None, {}))
    first_launch = launch.KernelPlans._first_launch
    with e2e_policies._slow_path_counter() as counts:
        assert fake.rms_norm(1) == 2
        assert fake.rms_norm(2) == 3
        assert launch.KernelPlans._first_launch(None, (1,), (), {}) == (None, {})
    assert counts == {"flag_gems.rms_norm": 2, "plan miss": 1}
    assert fake.rms_norm is rms_norm  # restored
    assert launch.KernelPlans._first_launch is first_launch


def test_each_step_is_compared_with_its_vendor_neighbours_within_its_batch():
    v, f = "prefer=vendor", "prefer=flagos"
    # head and tail steps (prefill, pipeline end) are left out: their 99s never count
    batch = [(v, 99.0), (f, 99.0), (v, 10.0), (f, 12.0), (v, 14.0), (f, 7.0), (v, 99.0), (f, 99.0)]
    assert e2e_policies.step_pairs([batch]) == {f: [12.0 / 12.0]}
    # a step with no vendor step after it in its batch is not compared
    other = [(f, 1.0), (v, 1.0), (v, 10.0), (f, 11.0), (v, 12.0), (f, 30.0), (v, 1.0), (f, 1.0)]
    assert e2e_policies.step_pairs([batch, other]) == {f: [1.0, 1.0]}


def test_bootstrap_interval_holds_the_median_and_narrows_with_more_steps():
    import random

    rng = random.Random(1)
    few = [1.03 + rng.gauss(0, 0.05) for _ in range(20)]
    many = [1.03 + rng.gauss(0, 0.05) for _ in range(2000)]
    low_few, high_few = bootstrap_median_ci(few)
    low, high = bootstrap_median_ci(many, draws=300)
    assert low_few <= sorted(few)[10] <= high_few
    assert low < 1.03 < high and high - low < high_few - low_few


def test_ab_steps_switch_policy_between_engine_steps(monkeypatch):
    """A host that slows down step after step: the flagos steps, 10% dearer than their
    vendor neighbours, read 1.1 whatever the drift; each batch starts with the next policy."""
    from vllm_fl.dispatch.policy.current import get_policy

    class Engine:
        def __init__(self):
            self.clock = 0.0
            self.policies: list[str] = []

        def step(self):
            self.clock += 1.0  # drift: every step slower than the last
            cost = 1.1 if get_policy().prefer == "flagos" else 1.0
            self.policies.append(get_policy().prefer)
            fake_time[0] += cost * (10.0 + self.clock) / 1e3
            return []

    fake_time = [0.0]
    engine = Engine()

    class LLM:
        llm_engine = engine

        def generate(self, batch, params, use_tqdm):
            for _ in range(10):
                self.llm_engine.step()

    monkeypatch.setattr(e2e_policies, "fresh_batches", lambda w: (None, lambda: None))
    monkeypatch.setattr(e2e_policies.time, "perf_counter", lambda: fake_time[0])
    options = {"batches": 3, "policies": ["prefer=vendor", "prefer=flagos"]}
    result = e2e_policies.steps_task(LLM(), Workload(task_options=options))
    assert result["paired_ratio"]["prefer=flagos"] == pytest.approx(1.1, abs=1e-3)
    assert result["slower_share"]["prefer=flagos"] == 1.0
    assert result["pairs"]["prefer=flagos"] == 3 * 2  # 6 kept steps a batch, 2 with neighbours
    warmup = 2 * 10
    starts = [engine.policies[warmup + 10 * b] for b in range(3)]
    assert starts == ["vendor", "flagos", "flagos"]  # see test_batch_order_...
    assert result["timelines"][1][0] == ["prefer=flagos", "prefer=vendor"]
    assert engine.step.__func__ is Engine.step  # the engine's own step again


def test_ab_steps_table_renders_each_policy_with_its_interval():
    from benchmarks.report_flagos import ab_steps_table

    result = {
        "mode": "steps",
        "step_ms": {"prefer=vendor": 30.0, "prefer=flagos": 31.0},
        "pairs": {"prefer=flagos": 300},
        "paired_ratio": {"prefer=flagos": 1.021},
        "paired_ratio_ci95": {"prefer=flagos": [1.012, 1.03]},
        "paired_ratio_quartiles": {"prefer=flagos": [0.98, 1.06]},
        "slower_share": {"prefer=flagos": 0.62},
    }
    rows = ab_steps_table(result).splitlines()
    assert rows[2].split("|")[1:4] == [" prefer=vendor ", " 30.00 ", " – "]
    assert "| 1.021× | 1.012-1.030 | 0.980-1.060 | 62% | 300 |" in rows[3]


def test_batch_order_puts_each_policy_as_often_after_the_vendor_step_as_before_it():
    names = ["prefer=vendor", "prefer=flagos", "prefer=vendor again"]
    orders = [e2e_policies.batch_order(names, b) for b in range(6)]
    assert orders[0] == names and orders[1] == names[::-1]
    assert [order[0] for order in orders] == [
        names[0],
        names[2],
        names[1],
        names[1],
        names[2],
        names[0],
    ]

    def right_after_vendor(order):  # in the cycle: the policy that follows prefer=vendor
        return order[(order.index("prefer=vendor") + 1) % len(order)]

    follows = [right_after_vendor(order) for order in orders]
    assert follows.count("prefer=flagos") == follows.count("prefer=vendor again") == 3


@pytest.mark.filterwarnings("ignore:CUDA is not available")
def test_the_engine_profile_task_reports_a_step_its_host_split_and_its_kernels(monkeypatch):
    """profile_task whole, on a stand-in engine whose batches do a little torch work (no GPU:
    the profiler finds no CUDA kernel, and the synchronisation is a no-op)."""
    import torch

    class _Engine:
        def __init__(self):
            self.batches = []

        def generate(self, batch, params, use_tqdm):
            self.batches.append(batch)
            torch.ones(64, 64) @ torch.ones(64, 64)

    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    engine = _Engine()
    workload = Workload(num_prompts=2, prompt_len=8, max_tokens=4)
    result = profile_engine.profile_task(engine, workload)
    # a warm-up, the timed batch and the two profiled ones, each of fresh prompts
    assert len(engine.batches) == 4
    assert len({str(batch) for batch in engine.batches}) == 4
    assert result["step_ms"] > 0
    assert result["gpu_kernel_ms_per_step"] == 0 and result["top_kernels_ms_per_step"] == []
    assert sum(result["host_ms_per_step_profiled"].values()) > 0
    assert any("generate" in row[0] for row in result["top_functions_ms_per_step"])

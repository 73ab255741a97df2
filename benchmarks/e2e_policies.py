"""End-to-end A/B designs ``policy-rounds`` and ``policy-steps``: policies compared inside one
engine.

Engines started apart differ in host speed by more than the configurations do. Here one engine
with the plugin loaded (in one process, ``VLLM_ENABLE_V1_MULTIPROCESSING=0``) switches the
dispatch's policy (`policy_context`) between its batches, each policy of ``--policies`` in turn,
in interleaved rounds (``policy-rounds``, each policy also compared with prefer=vendor round by
round; ``--checks`` counts, per policy and step, calls that reached FlagGems' own entry points,
launch-plan misses and CUDA synchronisations), or between its engine steps (``policy-steps``:
each step of a policy compared with the mean of the nearest prefer=vendor steps before and after
it in the same batch, some tens of milliseconds apart). Both run as engine tasks.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import inspect
import itertools
import time
from collections.abc import Iterator

from benchmarks.profile_engine import fresh_batches, step_ms
from benchmarks.report_flagos import ab_steps_table, ab_table
from benchmarks.timing import bootstrap_median_ci, median, quantile

ROUNDS_TASK = "benchmarks.e2e_policies:rounds_task"
STEPS_TASK = "benchmarks.e2e_policies:steps_task"


#: the policies an engine compares (the plugin's layers dispatch to each in turn)
AB_POLICIES = {
    "prefer=vendor": {"prefer": "vendor"},
    "prefer=flagos": {"prefer": "flagos"},
    **{
        f"flagos only {op}": {"prefer": "flagos", "flagos_whitelist": op}
        for op in ("rms_norm", "rotary_embedding", "silu_and_mul")
    },
    # prefer=vendor under another name: an A/A comparison, which should read 1.000
    "prefer=vendor again": {"prefer": "vendor"},
}
#: the policies compared where ``--policies`` names none
AB_DEFAULT = [name for name in AB_POLICIES if name != "prefer=vendor again"]


def rounds_task(llm, workload) -> dict:
    """Engine task (in the engine's process, with the plugin loaded): ms per engine step under
    each policy of AB_DEFAULT (or those the options' ``policies`` name), in interleaved rounds
    (the options' ``rounds``), so that every policy sees the same host. The host's speed drifts
    within a run, so each policy is also compared with prefer=vendor round by round (the order
    reversed every other round, so that a drift within a round favours neither), and the median
    of those paired ratios is reported beside the ratio of the medians. With the option
    ``checks``, one more batch per policy counts what would make a launch cost more than its
    plan: calls that reached FlagGems' own entry points or missed a launch plan, and CUDA
    synchronisations (``torch.cuda.set_sync_debug_mode``)."""
    from vllm_fl.dispatch import policy_context

    options = workload.task_options
    params, fresh = fresh_batches(workload)
    names = list(options.get("policies") or AB_DEFAULT)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_no in range(options["rounds"] + 1):  # round 0 warms every policy up
        for name in names if round_no % 2 == 0 else reversed(names):
            with policy_context(**AB_POLICIES[name]):
                ms = step_ms(llm, fresh(), params, workload.max_tokens)
            if round_no:
                samples[name].append(round(ms, 3))
    base = samples["prefer=vendor"]
    paired = {
        name: sorted(ms / vendor for ms, vendor in zip(values, base))
        for name, values in samples.items()
    }
    result = {
        "step_ms": {name: median(values) for name, values in samples.items()},
        "samples": samples,
        "paired_ratio": {name: round(median(r), 4) for name, r in paired.items()},
        "paired_ratio_range": {
            name: [round(r[0], 4), round(r[-1], 4)] for name, r in paired.items()
        },
    }
    if options.get("checks"):
        checks = {}
        for name in names:
            with policy_context(**AB_POLICIES[name]), _slow_path_counter() as counts:
                llm.generate(fresh(), params, use_tqdm=False)
            checks[name] = {key: value / workload.max_tokens for key, value in counts.items()}
        result["slow_paths_per_step"] = checks
    return result


#: ``--ab-steps``: steps left out at each end of a batch (the prefill, the first decode step
#: and the pipeline's last, whose work differs from a decode step's)
HEAD_STEPS, TAIL_STEPS = 2, 2


def steady_steps(batch: list) -> list:
    """A batch's steps without the ``HEAD_STEPS``/``TAIL_STEPS`` at its ends."""
    return batch[HEAD_STEPS : len(batch) - TAIL_STEPS]


def step_pairs(
    batches: list[list[tuple[str, float]]], base: str = "prefer=vendor"
) -> dict[str, list[float]]:
    """Per policy, each of its steps' time divided by the mean time of the nearest ``base``
    steps before and after it in the same batch; ``batches`` hold (policy, ms) per engine step,
    and the ``HEAD_STEPS``/``TAIL_STEPS`` steps at each end of a batch are left out."""
    ratios: dict[str, list[float]] = {}
    for batch in batches:
        kept = steady_steps(batch)
        base_at = [i for i, (name, _ms) in enumerate(kept) if name == base]
        for i, (name, ms) in enumerate(kept):
            before = [j for j in base_at if j < i]
            after = [j for j in base_at if j > i]
            if name == base or not before or not after:
                continue
            neighbours = (kept[before[-1]][1] + kept[after[0]][1]) / 2
            ratios.setdefault(name, []).append(ms / neighbours)
    return ratios


def batch_order(names: list[str], batch_no: int) -> list[str]:
    """The turn order of batch ``batch_no``: every other batch runs the cycle backwards (so
    each policy comes as often right after the prefer=vendor step as right before it), and
    each pair of batches starts one policy later."""
    cycle = names if batch_no % 2 == 0 else names[::-1]
    shift = (batch_no // 2) % len(names)
    return cycle[shift:] + cycle[:shift]


def steps_task(llm, workload) -> dict:
    """Engine task (in the engine's process, with the plugin loaded): the policies the options'
    ``policies`` name (or all of AB_DEFAULT) take turns engine step by engine step, in the
    order :func:`batch_order` gives each of the options' ``batches``; the ratio of each step to its prefer=vendor neighbours (:func:`step_pairs`), their
    median with a bootstrap 95% interval, quartiles and the share of steps slower than their
    neighbours."""
    from vllm_fl.dispatch import policy_context

    options = workload.task_options
    params, fresh = fresh_batches(workload)
    names = list(options.get("policies") or AB_DEFAULT)
    for name in names:  # launch plans, autotuning
        with policy_context(**AB_POLICIES[name]):
            llm.generate(fresh(), params, use_tqdm=False)
    engine = llm.llm_engine
    step = engine.step
    batches: list[list[tuple[str, float]]] = []
    orders = [batch_order(names, batch_no) for batch_no in range(options["batches"])]
    for order in orders:
        turns = itertools.cycle(order)
        timeline: list[tuple[str, float]] = []

        def alternating_step(timeline=timeline, turns=turns):
            name = next(turns)
            with policy_context(**AB_POLICIES[name]):  # re-selection happens here, untimed
                start = time.perf_counter()
                outputs = step()
                timeline.append((name, (time.perf_counter() - start) * 1e3))
            return outputs

        engine.step = alternating_step
        try:
            llm.generate(fresh(), params, use_tqdm=False)
        finally:
            engine.step = step
        batches.append(timeline)
    pairs = step_pairs(batches)
    kept = [step for batch in batches for step in steady_steps(batch)]
    result: dict = {
        "mode": "steps",
        "batches": options["batches"],
        "steps_per_batch": median([len(batch) for batch in batches]),
        "step_ms": {name: round(median([ms for n, ms in kept if n == name]), 3) for name in names},
        "pairs": {},
        "paired_ratio": {},
        "paired_ratio_ci95": {},
        "paired_ratio_quartiles": {},
        "slower_share": {},
        # per batch: its turn order and each step's ms
        "timelines": [
            [order, [round(ms, 3) for _n, ms in batch]] for order, batch in zip(orders, batches)
        ],
    }
    for name, ratios in pairs.items():
        ordered = sorted(ratios)
        low, high = bootstrap_median_ci(ordered)
        result["pairs"][name] = len(ordered)
        result["paired_ratio"][name] = round(median(ordered), 4)
        result["paired_ratio_ci95"][name] = [round(low, 4), round(high, 4)]
        result["paired_ratio_quartiles"][name] = [
            round(quantile(ordered, 0.25), 4),
            round(quantile(ordered, 0.75), 4),
        ]
        result["slower_share"][name] = round(sum(r > 1 for r in ordered) / len(ordered), 3)
    return result


@contextlib.contextmanager
def _slow_path_counter() -> Iterator[collections.Counter]:
    """Counts, while inside: calls of FlagGems' public functions (our impls call them only
    where no launch plan applies), launch-plan misses, and CUDA synchronisations."""
    import warnings

    import flag_gems
    import torch

    from vllm_fl.kernels import launch

    counts: collections.Counter = collections.Counter()

    def counted(key: str, function):
        @functools.wraps(function)
        def call(*a, **kw):
            counts[key] += 1
            return function(*a, **kw)

        return call

    patched = [
        (flag_gems, attr, f"flag_gems.{attr}")
        for attr in dir(flag_gems)
        if not attr.startswith("_") and inspect.isfunction(getattr(flag_gems, attr))
    ]
    patched.append((launch.KernelPlans, "_first_launch", "plan miss"))
    originals = [getattr(owner, attr) for owner, attr, _key in patched]
    for (owner, attr, key), original in zip(patched, originals):
        setattr(owner, attr, counted(key, original))
    try:
        sync_check = torch.cuda.is_available()  # the mode exists on CUDA builds only
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if sync_check:
                torch.cuda.set_sync_debug_mode("warn")
            try:
                yield counts
            finally:
                if sync_check:
                    torch.cuda.set_sync_debug_mode("default")
        for warning in caught:
            if "called a synchronizing" in str(warning.message):  # not the mode's own notice
                counts[f"sync: {str(warning.message)[:80]}"] += 1
    finally:
        for (owner, attr, _key), original in zip(patched, originals):
            setattr(owner, attr, original)


def print_report(result: dict) -> None:
    """One configuration's comparison, as a terminal table."""
    if "error" in result:
        print(f"{result['config']}: error: {result['error']}")
        return
    if result.get("mode") == "steps":
        print(f"{result['config']}, one engine, policies taking turns step by step:")
        print(ab_steps_table(result))
        return
    if "samples" in result:
        print(f"{result['config']}, one engine, ms per step:")
        print(ab_table(result))
        for name, counts in result.get("slow_paths_per_step", {}).items():
            print(f"    {name}: per step {counts or 'no FlagGems entry, plan miss or sync'}")
        return

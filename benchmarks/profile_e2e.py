"""Where a decode step's time goes in real vLLM, per configuration (eager, or compiled).

bench_e2e.py says how fast a configuration is; this says why. For each configuration it starts a
fresh Python process with the engine in that process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, so
the model's work can be profiled; the throughput figures belong to bench_e2e.py), builds the
model with dummy weights in eager mode (``--mode compile``: torch.compile and CUDA graphs), and
generates a decode-heavy batch (short prompts) three ways after a warm-up:

- timed: wall seconds, and milliseconds per engine step;
- under ``torch.profiler``: the GPU's kernel time per step (the rest of a step is the GPU
  waiting for the host) and the kernels that take most of it;
- under cProfile: the host time per step split by origin (as profile_flagos.py splits it:
  ``vllm_fl``, ``flag_gems``, ``triton``, ``torch``, C calls; vLLM's own Python is ``vllm``),
  the functions with the most time of their own, and ours with the most time in all (with
  their calls per step: a launch plan that misses shows as FlagGems' entry being called).

    python benchmarks/profile_e2e.py --configs vanilla,prefer=flagos --json profile_e2e.json

Engines started apart differ in host speed by more than the configurations do. With --ab the
comparison happens inside one engine with the plugin loaded: each policy of AB_DEFAULT
(prefer=vendor, prefer=flagos, FlagGems for one op only) in turn, in interleaved rounds:

    python benchmarks/profile_e2e.py --configs plugin --ab --ab-rounds 3

``--ab-policies prefer=vendor,prefer=flagos`` compares fewer policies (more rounds in the same
time); ``--ab-checks`` also counts, per policy and step, calls that reached FlagGems' own entry
points, launch-plan misses and CUDA synchronisations.

The host's speed also drifts within a round. With ``--ab-steps`` the policies take turns engine
step by engine step instead (the policy switched between steps, outside the timed part), and each
step of a policy is compared with the mean of the nearest prefer=vendor steps before and after it
in the same batch, some tens of milliseconds apart:

    python benchmarks/profile_e2e.py --configs plugin --ab-steps --ab-batches 20 --output-len 64
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import cProfile
import functools
import inspect
import itertools
import json
import pstats
import sys
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_e2e import CONFIGS, config_env, dummy_model_args, shape_model_dir  # noqa: E402
from harness import (  # noqa: E402
    bootstrap_median_ci,
    median,
    name_list,
    quantile,
    refuse_unknown,
    sweep_configs,
    worker_result,
)
from profile_flagos import _origin  # noqa: E402
from report_flagos import ab_steps_table, ab_table  # noqa: E402
from shapes import MODELS, QUANTIZATIONS  # noqa: E402
from vllm_runner import Workload, build_llm, prompts, sampling_params  # noqa: E402

RESULT_PREFIX = "PROFILE_E2E "
TOP = 30


def origin(filename: str, name: str) -> str:
    """profile_flagos's origin buckets, with vLLM's own Python told apart from torch's."""
    if "/vllm/" in filename and "/vllm_fl/" not in filename:
        return "vllm"
    return _origin(filename, name)


def host_split(stats: dict, steps: int) -> tuple[dict[str, float], list[list], list[list]]:
    """Host ms per step by origin; the functions with the most own time and our functions with
    the most time in all, as [function, own ms, cumulative ms, calls] per step."""
    by_origin: dict[str, float] = {}
    rows = []
    for (filename, line, name), (_cc, calls, tottime, cumtime, _callers) in stats.items():
        bucket = origin(filename, name)
        by_origin[bucket] = by_origin.get(bucket, 0.0) + tottime
        where = f"{Path(filename).name}:{line}({name})" if filename != "~" else name
        rows.append((bucket, [where, tottime, cumtime, calls]))
    per_step = {k: round(v / steps * 1e3, 3) for k, v in sorted(by_origin.items())}

    def scaled(row: list) -> list:
        where, own, cumulative, calls = row
        return [
            where,
            round(own / steps * 1e3, 3),
            round(cumulative / steps * 1e3, 3),
            round(calls / steps, 1),
        ]

    by_own = sorted((row for _b, row in rows), key=lambda row: -row[1])[:TOP]
    ours = sorted((row for b, row in rows if b == "vllm_fl"), key=lambda row: -row[2])[:TOP]
    return per_step, [scaled(r) for r in by_own], [scaled(r) for r in ours]


def kernel_split(profiler, steps: int) -> tuple[float, list[tuple[str, float]]]:
    """GPU kernel ms per step, and the kernels with the most time (ms per step)."""
    import torch

    kernels = []
    for event in profiler.key_averages():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        kernels.append((event.key[:80], event.self_device_time_total / 1e3 / steps))
    kernels.sort(key=lambda item: -item[1])
    total = sum(ms for _key, ms in kernels)
    return round(total, 3), [(key, round(ms, 3)) for key, ms in kernels[:TOP]]


#: ``--ab``: policies compared inside one engine (the plugin's layers dispatch to each in turn)
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
#: the policies compared where ``--ab-policies`` names none
AB_DEFAULT = [name for name in AB_POLICIES if name != "prefer=vendor again"]


def _engine(model_dir: str, args):
    """This process's engine (eager or compiled: ``--mode``), greedy sampling params, and a
    source of batches of fresh prompts (a prompt seen before would come from vLLM's prefix
    cache)."""
    workload = Workload(
        mode=args.mode,
        max_tokens=args.output_len,
        num_prompts=args.prompts,
        prompt_len=args.input_len,
        llm_args=dummy_model_args(args.input_len, args.output_len),
    )
    llm = build_llm(model_dir, args.mode, workload.llm_args)
    params = sampling_params(workload.max_tokens, detokenize=False)
    seeds = itertools.count()
    return llm, params, lambda: prompts(workload, next(seeds))


def _step_ms(llm, batch, params, steps: int) -> float:
    start = time.perf_counter()
    llm.generate(batch, params, use_tqdm=False)
    return (time.perf_counter() - start) * 1e3 / steps


def profile_config(model_dir: str, args) -> dict:
    """In this process: the engine, a warm-up, then the timed and the two profiled batches."""
    import torch

    llm, params, fresh = _engine(model_dir, args)
    batches = [fresh() for _ in range(4)]
    llm.generate(batches[0], params, use_tqdm=False)  # warm-up: plans, autotuning
    steps = args.output_len  # one prefill step, then a decode step per further token

    step_ms = _step_ms(llm, batches[1], params, steps)

    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    ) as profiler:
        llm.generate(batches[2], params, use_tqdm=False)
    torch.cuda.synchronize()
    gpu_ms, top_kernels = kernel_split(profiler, steps)

    host = cProfile.Profile()
    host.enable()
    llm.generate(batches[3], params, use_tqdm=False)
    host.disable()
    by_origin, top_functions, our_functions = host_split(pstats.Stats(host).stats, steps)
    return {
        "step_ms": round(step_ms, 3),
        "gpu_kernel_ms_per_step": gpu_ms,
        "host_ms_per_step_profiled": by_origin,
        "top_kernels_ms_per_step": top_kernels,
        "top_functions_ms_per_step": top_functions,
        "our_functions_ms_per_step": our_functions,
    }


def ab_config(model_dir: str, args) -> dict:
    """In this process, with the plugin loaded: ms per engine step under each policy of
    AB_DEFAULT (or those ``args.ab_policies`` names), in interleaved rounds, so that every
    policy sees the same host. The host's speed drifts within a run, so each policy is also compared with
    prefer=vendor round by round (the order reversed every other round, so that a drift within
    a round favours neither), and the median of those paired ratios is reported beside the
    ratio of the medians. With ``args.ab_checks``, one more batch per policy counts what would
    make a launch cost more than its plan: calls that reached FlagGems' own entry points or
    missed a launch plan, and CUDA synchronisations (``torch.cuda.set_sync_debug_mode``)."""
    from vllm_fl.dispatch.policy.current import policy_context

    llm, params, fresh = _engine(model_dir, args)
    names = list(args.ab_policies or AB_DEFAULT)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_no in range(args.ab_rounds + 1):  # round 0 warms every policy up
        for name in names if round_no % 2 == 0 else reversed(names):
            with policy_context(**AB_POLICIES[name]):
                ms = _step_ms(llm, fresh(), params, args.output_len)
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
    if args.ab_checks:
        checks = {}
        for name in names:
            with policy_context(**AB_POLICIES[name]), _slow_path_counter() as counts:
                llm.generate(fresh(), params, use_tqdm=False)
            checks[name] = {key: value / args.output_len for key, value in counts.items()}
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


def ab_steps_config(model_dir: str, args) -> dict:
    """In this process, with the plugin loaded: the policies of ``args.ab_policies`` (or all of
    AB_DEFAULT) take turns engine step by engine step, in the order :func:`batch_order` gives
    each batch; the ratio of each step to its prefer=vendor neighbours (:func:`step_pairs`), their
    median with a bootstrap 95% interval, quartiles and the share of steps slower than their
    neighbours."""
    from vllm_fl.dispatch.policy.current import policy_context

    llm, params, fresh = _engine(model_dir, args)
    names = list(args.ab_policies or AB_DEFAULT)
    for name in names:  # launch plans, autotuning
        with policy_context(**AB_POLICIES[name]):
            llm.generate(fresh(), params, use_tqdm=False)
    engine = llm.llm_engine
    step = engine.step
    batches: list[list[tuple[str, float]]] = []
    orders = [batch_order(names, batch_no) for batch_no in range(args.ab_batches)]
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
        "batches": args.ab_batches,
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


def run_config(name: str, model_dir: str, args) -> dict:
    env = config_env(name, VLLM_ENABLE_V1_MULTIPROCESSING="0")
    argv = [sys.executable, __file__, "--worker", model_dir, *_shared_argv(args)]
    if args.ab_steps:
        argv += ["--ab-steps", f"--ab-batches={args.ab_batches}"]
    elif args.ab:
        argv += ["--ab", f"--ab-rounds={args.ab_rounds}"]
        if args.ab_checks:
            argv.append("--ab-checks")
    if (args.ab_steps or args.ab) and args.ab_policies:
        argv.append(f"--ab-policies={','.join(args.ab_policies)}")
    return worker_result(argv, env, RESULT_PREFIX, args.timeout)


def _shared_argv(args) -> list[str]:
    return [
        f"--prompts={args.prompts}",
        f"--mode={args.mode}",
        f"--input-len={args.input_len}",
        f"--output-len={args.output_len}",
    ]


def print_report(result: dict) -> None:
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
    host = result["host_ms_per_step_profiled"]
    print(
        f"{result['config']}: {result['step_ms']} ms per step, GPU kernels "
        f"{result['gpu_kernel_ms_per_step']} ms; host under cProfile "
        f"{sum(host.values()):.2f} ms: "
        + ", ".join(f"{k} {v}" for k, v in sorted(host.items(), key=lambda kv: -kv[1]))
    )
    for key, ms in result["top_kernels_ms_per_step"]:
        print(f"    kernel {ms:8.3f}  {key}")
    print("    host ms per step: own, cumulative, calls")
    for title, key in (("", "top_functions_ms_per_step"), ("ours ", "our_functions_ms_per_step")):
        for where, own, cumulative, calls in result[key]:
            print(f"    {title}host {own:8.3f} {cumulative:8.3f} {calls:7.1f}  {where}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=name_list, default="vanilla,prefer=flagos")
    parser.add_argument("--shape", choices=sorted(MODELS), default="llama3-8b")
    parser.add_argument(
        "--mode",
        choices=("eager", "compile"),
        default="eager",
        help="compile: torch.compile and CUDA graphs, as vLLM runs by default",
    )
    parser.add_argument("--layers", type=int, help="fewer decoder layers than the shape has")
    parser.add_argument(
        "--quant", choices=sorted(QUANTIZATIONS), help="a quantized checkpoint of this format"
    )
    parser.add_argument("--prompts", type=int, default=256)
    parser.add_argument("--input-len", type=int, default=16)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--timeout", type=int, default=400)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--ab",
        action="store_true",
        help="instead: each config's engine times every policy of AB_DEFAULT in turn",
    )
    parser.add_argument("--ab-rounds", type=int, default=3)
    parser.add_argument(
        "--ab-policies",
        type=name_list,
        help=f"with --ab or --ab-steps: these of {', '.join(AB_POLICIES)} (prefer=vendor among them)",
    )
    parser.add_argument(
        "--ab-checks",
        action="store_true",
        help="with --ab: count FlagGems entry calls, plan misses and CUDA syncs per policy",
    )
    parser.add_argument(
        "--ab-steps",
        action="store_true",
        help="instead: the policies take turns step by step inside each config's engine",
    )
    parser.add_argument("--ab-batches", type=int, default=10, help="with --ab-steps")
    parser.add_argument("--worker", metavar="MODEL_DIR", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        work = ab_steps_config if args.ab_steps else ab_config if args.ab else profile_config
        print(RESULT_PREFIX + json.dumps(work(args.worker, args)), flush=True)
        return 0
    if args.ab_policies is not None:
        wrong = [p for p in args.ab_policies if p not in AB_POLICIES]
        if wrong or "prefer=vendor" not in args.ab_policies:
            parser.error(
                f"--ab-policies: {', '.join(wrong) or 'prefer=vendor missing'}; allowed: "
                f"{', '.join(AB_POLICIES)}, prefer=vendor among them"
            )
    refuse_unknown(parser, "--configs", args.configs, CONFIGS)
    model_dir = shape_model_dir(args.shape, args.layers, args.quant)
    sweep_configs(
        args.configs, lambda name: run_config(name, model_dir, args), print_report, args.json
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

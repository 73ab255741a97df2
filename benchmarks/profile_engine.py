"""Where a decode step's time goes in real vLLM, per configuration (eager, or compiled).

The end-to-end designs (`benchmarks.e2e`) say how fast a configuration is; this says why. For each
configuration it starts an engine in one process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, so that
the model's work can be profiled) with dummy weights, and in that process (an engine task)
generates a decode-heavy batch (short prompts) three ways after a warm-up:

- timed: milliseconds per engine step;
- under ``torch.profiler``: the GPU's kernel time per step (the rest of a step is the GPU
  waiting for the host) and the kernels that take most of it;
- under cProfile: the host time per step split by origin (``vllm_fl``, ``flag_gems``,
  ``triton``, ``torch``, C calls; vLLM's own Python is ``vllm``), the functions with the most
  time of their own, and ours with the most time in all (with their calls per step).

    python -m benchmarks.profile_engine --configs vanilla,prefer=flagos --json profile.json
"""

from __future__ import annotations

import argparse
import itertools
import cProfile
import pstats
import sys
import time
from pathlib import Path

from benchmarks.cli import name_list
from benchmarks.engines import (
    MODES,
    add_engine_arguments,
    check_configs,
    check_engine_arguments,
    prepare_model,
    run_configs,
    workload,
)
from benchmarks.profile_flagos import origin as flagos_origin

TASK = "benchmarks.profile_engine:profile_task"
TOP = 30


def fresh_batches(workload):
    """Greedy sampling params and a source of batches of fresh prompts (a prompt seen before
    would come from vLLM's prefix cache)."""
    from vllm_fl.testing.engine import prompts, sampling_params

    params = sampling_params(workload.max_tokens, workload.detokenize)
    seeds = itertools.count()
    return params, lambda: prompts(workload, next(seeds))


def step_ms(llm, batch, params, steps: int) -> float:
    """Wall ms per engine step of generating `batch`."""
    start = time.perf_counter()
    llm.generate(batch, params, use_tqdm=False)
    return (time.perf_counter() - start) * 1e3 / steps


def origin(filename: str, name: str) -> str:
    """profile_flagos's origin buckets, with vLLM's own Python told apart from torch's."""
    if "/vllm/" in filename and "/vllm_fl/" not in filename:
        return "vllm"
    return flagos_origin(filename, name)


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


def profile_task(llm, workload) -> dict:
    """Engine task (in the engine's process): a warm-up, then the timed and the two profiled
    batches."""
    import torch

    params, fresh = fresh_batches(workload)
    batches = [fresh() for _ in range(4)]
    llm.generate(batches[0], params, use_tqdm=False)  # warm-up: plans, autotuning
    steps = workload.max_tokens  # one prefill step, then a decode step per further token

    ms_per_step = step_ms(llm, batches[1], params, steps)

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
        "step_ms": round(ms_per_step, 3),
        "gpu_kernel_ms_per_step": gpu_ms,
        "host_ms_per_step_profiled": by_origin,
        "top_kernels_ms_per_step": top_kernels,
        "top_functions_ms_per_step": top_functions,
        "our_functions_ms_per_step": our_functions,
    }


def print_report(result: dict) -> None:
    if "error" in result:
        print(f"{result['config']}: error: {result['error']}")
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
    parser.add_argument("--mode", choices=MODES, default="eager")
    add_engine_arguments(parser, shape="llama3-8b", input_len=16)
    parser.set_defaults(output_len=32)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    check_configs(parser, args.configs)
    check_engine_arguments(parser, args)
    model = prepare_model(args.shape, args.layers, args.quant)
    run_configs("profile", model, workload(model, args.mode, args, task=TASK), args, print_report)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where an engine step's time goes with the engine core in a process of its own (vLLM's default).

``benchmarks.profile_engine`` profiles with the engine in the runner's process; some costs show
only in the default process layout, where the engine core runs apart with its own threads and schedules
asynchronously (the host prepares the next step while the GPU runs this one). For each
configuration this starts vLLM that way with vLLM's own torch profiler on in the engine core,
generates warm-up batches, then profiles one decode-heavy batch, and reads the engine core's
trace (an engine task):

- wall ms per step, GPU busy ms per step (the union of kernel and copy intervals) and the GPU's
  idle share: a step the GPU waits for is bound by the host;
- per thread of the engine core, the ms per step it spent in profiled work;
- the CUDA runtime calls with the most time (a synchronisation shows here) and the kernels;
- with ``--with-stack``, the Python functions with the most time of the plugin, FlagGems and
  Triton (inclusive; recording the frames slows every step).

    python -m benchmarks.trace_engine --configs vanilla,prefer=flagos --shape qwen3-moe \\
        --layers 16 --mode compile --json trace.json
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import sys
import tempfile
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

TASK = "benchmarks.trace_engine:trace_task"
TOP = 15
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
#: Python files whose functions are listed apart (where the plugin's host time would be)
OURS = ("vllm_fl", "flag_gems", "triton")


def _union_us(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of [start, end) intervals."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total


def _top(totals: dict[str, list[float]], steps: int) -> list[list]:
    """[name, ms per step, calls per step] of the names with the most time."""
    rows = sorted(totals.items(), key=lambda item: -item[1][0])[:TOP]
    return [[name[:90], round(us / 1e3 / steps, 3), round(n / steps, 1)] for name, (us, n) in rows]


def summarize(events: list[dict], steps: int) -> dict:
    """The figures of the module docstring from a Chrome trace's complete events."""
    complete = [e for e in events if e.get("ph") == "X" and "dur" in e]
    gpu = [e for e in complete if e.get("cat") in GPU_CATEGORIES]
    # besides GPU_CATEGORIES, the device's rows hold gpu_user_annotation (the GPU-side spans of
    # record_function ranges)
    host = [
        e
        for e in complete
        if e.get("cat") not in GPU_CATEGORIES and not str(e.get("cat", "")).startswith("gpu_")
    ]
    start = min(e["ts"] for e in complete)
    end = max(e["ts"] + e["dur"] for e in complete)
    busy = _union_us([(e["ts"], e["ts"] + e["dur"]) for e in gpu])
    by_thread: dict[str, list] = collections.defaultdict(list)
    for e in host:
        by_thread[f"{e.get('pid')}/{e.get('tid')}"].append((e["ts"], e["ts"] + e["dur"]))
    totals: dict[str, dict[str, list[float]]] = {
        "runtime": collections.defaultdict(lambda: [0.0, 0]),
        "kernels": collections.defaultdict(lambda: [0.0, 0]),
        "ours": collections.defaultdict(lambda: [0.0, 0]),
    }
    for e in complete:
        cat, name = e.get("cat"), e.get("name", "")
        if cat == "cuda_runtime":
            key = "runtime"
        elif cat in GPU_CATEGORIES:
            key = "kernels"
        elif cat == "python_function" and any(f"{part}/" in name for part in OURS):
            key = "ours"
        else:
            continue
        totals[key][name][0] += e["dur"]
        totals[key][name][1] += 1
    per_step = (end - start) / 1e3 / steps
    return {
        "steps": steps,
        "wall_ms_per_step": round(per_step, 3),
        "gpu_busy_ms_per_step": round(busy / 1e3 / steps, 3),
        "gpu_idle_share": round(1 - busy / (end - start), 3),
        "threads_ms_per_step": {
            thread: round(_union_us(spans) / 1e3 / steps, 3)
            for thread, spans in sorted(by_thread.items(), key=lambda item: -len(item[1]))[:8]
        },
        "top_runtime_calls": _top(totals["runtime"], steps),
        "top_kernels": _top(totals["kernels"], steps),
        "top_our_functions": _top(totals["ours"], steps),
    }


def read_trace(path: str) -> list[dict]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as handle:
        return json.load(handle).get("traceEvents", [])


def trace_task(llm, workload) -> dict:
    """Engine task (the engine core apart, as vLLM starts it, its profiler configured by the
    workload's ``profiler_config``): warm-up, then one profiled batch; the engine core's trace
    summarized."""
    from vllm_fl.testing.engine import prompts, sampling_params

    trace_dir = workload.llm_args["profiler_config"]["torch_profiler_dir"]
    params = sampling_params(workload.max_tokens, workload.detokenize)
    for seed in range(2):  # warm-up: compiled shapes, launch plans, autotuning
        llm.generate(prompts(workload, seed), params, use_tqdm=False)
    # the folder is shared by every configuration's engine: this one's trace is the new one
    before = set(glob.glob(os.path.join(trace_dir, "*.json*")))
    llm.start_profile()
    llm.generate(prompts(workload, 2), params, use_tqdm=False)
    llm.stop_profile()
    traces = sorted(set(glob.glob(os.path.join(trace_dir, "*.json*"))) - before)
    if not traces:
        return {"error": f"no trace in {trace_dir}"}
    return {
        "trace": os.path.basename(traces[0]),
        **summarize(read_trace(traces[0]), workload.max_tokens),
    }


def profiler_config(with_stack: bool) -> dict:
    """vLLM's torch profiler in the engine core, its traces in a fresh directory."""
    return {
        "profiler": "torch",
        "torch_profiler_dir": tempfile.mkdtemp(prefix="vllm_fl_trace_"),
        "ignore_frontend": True,
        # Python frames cost host time in every step: only on request
        "torch_profiler_with_stack": with_stack,
    }


def print_report(result: dict) -> None:
    if "error" in result:
        print(f"{result['config']}: error: {result['error']}")
        return
    print(
        f"{result['config']} ({result['mode']}): {result['wall_ms_per_step']} ms per step, GPU "
        f"busy {result['gpu_busy_ms_per_step']} ms, GPU idle {result['gpu_idle_share']:.1%}"
    )
    for thread, ms in result["threads_ms_per_step"].items():
        print(f"    thread {thread:>16}  {ms:8.3f} ms per step")
    for title in ("top_runtime_calls", "top_kernels", "top_our_functions"):
        for name, ms, calls in result[title]:
            print(f"    {title[4:-1]:<14} {ms:8.3f} ms {calls:7.1f} calls  {name}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=name_list, default="vanilla,prefer=flagos")
    parser.add_argument("--mode", choices=MODES, default="compile")
    add_engine_arguments(parser, shape="llama3-8b", input_len=16)
    parser.set_defaults(prompts=128, output_len=32)
    parser.add_argument(
        "--with-stack", action="store_true", help="record Python frames (the last table)"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    check_configs(parser, args.configs)
    check_engine_arguments(parser, args)
    model = prepare_model(args.shape, args.layers, args.quant)
    llm_args = {
        **model.llm_args(args.input_len, args.output_len),
        "profiler_config": profiler_config(args.with_stack),
    }
    work = workload(model, args.mode, args, task=TASK, llm_args=llm_args)
    # the engine core in a process of its own, as vLLM starts it (what this traces)
    run_configs("trace", model, work, args, print_report, in_process=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())

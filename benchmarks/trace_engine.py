"""Where an engine step's time goes with the engine core in a process of its own (vLLM's default).

``profile_e2e.py`` profiles with the engine in the caller's process; some costs show only in the
default process layout, where the engine core runs apart with its own threads and schedules
asynchronously (the host prepares the next step while the GPU runs this one). For each
configuration this starts vLLM that way with vLLM's own torch profiler on in the engine core,
generates a warm-up batch, then profiles one decode-heavy batch, and reads the engine core's
trace:

- wall ms per step, GPU busy ms per step (the union of kernel and copy intervals) and the GPU's
  idle share: a step the GPU waits for is bound by the host;
- per thread of the engine core, the ms per step it spent in profiled work;
- the CUDA runtime calls with the most time (a synchronisation shows here) and the kernels;
- with ``--with-stack``, the Python functions with the most time of the plugin, FlagGems and
  Triton (inclusive; recording the frames slows every step).

    python benchmarks/trace_engine.py --configs vanilla,prefer=flagos --shape qwen3-moe \\
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_e2e import CONFIGS, config_env, dummy_model_args, shape_model_dir  # noqa: E402
from harness import name_list, refuse_unknown, sweep_configs, worker_result  # noqa: E402
from shapes import MODELS  # noqa: E402
from vllm_runner import Workload, build_llm, prompts, sampling_params  # noqa: E402

RESULT_PREFIX = "TRACE_ENGINE "
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


def _read_trace(path: str) -> list[dict]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as handle:
        return json.load(handle).get("traceEvents", [])


def trace_config(model_dir: str, args) -> dict:
    """In this process (the engine core apart, as vLLM starts it): warm-up, then one profiled
    batch; the engine core's trace summarized."""
    trace_dir = tempfile.mkdtemp(prefix="vllm_fl_trace_")
    workload = Workload(
        mode=args.mode,
        max_tokens=args.output_len,
        num_prompts=args.prompts,
        prompt_len=args.input_len,
        llm_args=dummy_model_args(args.input_len, args.output_len),
    )
    profiler = {
        "profiler": "torch",
        "torch_profiler_dir": trace_dir,
        "ignore_frontend": True,
        # Python frames cost host time in every step: only on request
        "torch_profiler_with_stack": args.with_stack,
    }
    llm = build_llm(model_dir, args.mode, {**workload.llm_args, "profiler_config": profiler})
    params = sampling_params(workload.max_tokens, detokenize=False)
    for seed in range(2):  # warm-up: compiled shapes, launch plans, autotuning
        llm.generate(prompts(workload, seed), params, use_tqdm=False)
    llm.start_profile()
    llm.generate(prompts(workload, 2), params, use_tqdm=False)
    llm.stop_profile()
    traces = sorted(glob.glob(os.path.join(trace_dir, "*.json*")))
    if not traces:
        return {"error": f"no trace in {trace_dir}"}
    return {
        "mode": args.mode,
        "trace": os.path.basename(traces[0]),
        **summarize(_read_trace(traces[0]), args.output_len),
    }


def run_config(name: str, model_dir: str, args) -> dict:
    """One configuration in a fresh process with its environment: the worker's result."""
    env = config_env(name)
    argv = [
        sys.executable, __file__, "--worker", model_dir, f"--mode={args.mode}",
        f"--prompts={args.prompts}", f"--input-len={args.input_len}",
        f"--output-len={args.output_len}", *(["--with-stack"] if args.with_stack else []),
    ]  # fmt: skip
    return worker_result(argv, env, RESULT_PREFIX, args.timeout)


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
    parser.add_argument("--shape", choices=sorted(MODELS), default="llama3-8b")
    parser.add_argument("--layers", type=int, help="fewer decoder layers than the shape has")
    parser.add_argument("--mode", choices=("eager", "compile"), default="compile")
    parser.add_argument("--prompts", type=int, default=128)
    parser.add_argument("--input-len", type=int, default=16)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--timeout", type=int, default=400)
    parser.add_argument(
        "--with-stack", action="store_true", help="record Python frames (the last table)"
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--worker", metavar="MODEL_DIR", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(RESULT_PREFIX + json.dumps(trace_config(args.worker, args)), flush=True)
        return 0
    refuse_unknown(parser, "--configs", args.configs, CONFIGS)
    model_dir = shape_model_dir(args.shape, args.layers)
    sweep_configs(
        args.configs, lambda name: run_config(name, model_dir, args), print_report, args.json
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

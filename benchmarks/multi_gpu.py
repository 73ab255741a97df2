"""Tensor parallelism across the GPUs of one host: vanilla vLLM against the plugin's policies.

    python -m benchmarks.multi_gpu --tp 2 --configs vanilla,plugin,flagos-deny-cuda \\
        --modes eager,compile --shape llama3-8b --dummy-range 0.05

Each configuration runs in vLLM's default process layout (one engine process, one worker per
GPU) with ``tensor_parallel_size``: a warm-up, a timed batch (output tokens per second, its
greedy tokens), then one profiled batch whose traces (vLLM's torch profiler, one per worker) are
counted by kernel origin: every compiled kernel a worker ran, NCCL's apart. Tokens are compared
with the first configuration's (vanilla), as identical prompts and tokens before the first
difference; ``--expert-parallel`` splits a MoE model's experts across the GPUs instead of each
expert's weights; ``--configs`` may name ``flagcx`` (the portable path with FlagCX collectives, the
variable ``FLAGCX_PATH`` given through ``--env``).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

from benchmarks.engines import (
    CONFIGS,
    MODES,
    add_engine_arguments,
    check_engine_arguments,
    config_env,
    log_path,
    prepare_model,
    run_engine,
    workload,
)
from benchmarks.trace_engine import profiler_config, read_trace
from vllm_fl.testing.census import compare_outputs, kernel_origin

TASK = "benchmarks.multi_gpu:tp_task"


def _config_env(name: str, extra: dict[str, str], flagcx_path: str | None) -> dict[str, str]:
    """Configuration ``name``'s environment; ``FLAGCX_PATH`` only for ``flagcx``."""
    if name == "flagcx":
        if flagcx_path is None:
            raise SystemExit("configuration flagcx needs --flagcx-path")
        # the portable path, its collectives on FlagCX
        return {**config_env("flagos-deny-cuda", extra), "FLAGCX_PATH": flagcx_path}
    env = config_env(name, extra)
    env.pop("FLAGCX_PATH", None)
    return env


def worker_kernels(trace_files: list[str]) -> list[dict[str, int]]:
    """Per trace (one per worker): kernel name -> launches, of the kernels not from aten,
    cuBLAS or Triton (compiled C++: vLLM's own, NCCL, FlashAttention, ...)."""
    out = []
    for path in trace_files:
        events = read_trace(path)
        counts: Counter[str] = Counter()
        for event in events:
            if event.get("cat") == "kernel" and kernel_origin(event["name"]) == "compiled":
                counts[event["name"][:160]] += 1
        out.append(dict(counts))
    return out


def tp_task(llm, work) -> dict:
    """Warm-up, a timed batch, a profiled batch; the tokens, tok/s and the workers' kernels."""
    from vllm_fl.testing.census import sequence_outputs
    from vllm_fl.testing.engine import prompts, sampling_params

    params = sampling_params(work.max_tokens, work.detokenize, logprobs=1)
    # a warm-up batch of the timed batch's size: the Triton kernels its token counts need are
    # compiled (or loaded from the disk cache an earlier engine filled) before the clock starts
    llm.generate(prompts(work, 1), params, use_tqdm=False)
    batch = prompts(work, 0)
    start = time.perf_counter()
    outputs = llm.generate(batch, params, use_tqdm=False)
    seconds = time.perf_counter() - start
    n_out = sum(len(o.outputs[0].token_ids) for o in outputs)
    trace_dir = work.llm_args["profiler_config"]["torch_profiler_dir"]
    before = set(glob.glob(os.path.join(trace_dir, "**", "*.json*"), recursive=True))
    llm.start_profile()
    llm.generate(prompts(work, 2)[:8], params, use_tqdm=False)
    llm.stop_profile()
    time.sleep(2)  # the workers write their traces as they stop
    traces = sorted(
        set(glob.glob(os.path.join(trace_dir, "**", "*.json*"), recursive=True)) - before
    )
    return {
        "sequences": sequence_outputs(outputs),
        "tokens_per_s": round(n_out / seconds, 1),
        "traces": [os.path.basename(t) for t in traces],
        "worker_kernels": worker_kernels(traces),
    }


def _row(result: dict, base: dict | None) -> str:
    if "error" in result:
        return f"{result['config']:<18} {result['mode']:<8} error: {result['error'][:300]}"
    kernels = result.get("worker_kernels") or []
    nccl = [sum(c for k, c in w.items() if "nccl" in k.lower()) for w in kernels]
    other = [{k: c for k, c in w.items() if "nccl" not in k.lower()} for w in kernels]
    ratio = ""
    same = ""
    if base is not None and "error" not in base:
        ratio = f"{result['tokens_per_s'] / base['tokens_per_s']:.3f}x"
        cmp = compare_outputs(base["sequences"], result["sequences"])
        same = (
            f"{cmp['identical']}/{cmp['sequences']} identical, "
            f"{cmp['tokens_agreeing']}/{cmp['tokens']} tokens before a difference"
        )
    text = (
        f"{result['config']:<18} {result['mode']:<8} {result['tokens_per_s']:>9} tok/s "
        f"{ratio:>7} {same}; per worker: NCCL kernels {nccl}, other compiled "
        f"{[sum(o.values()) for o in other]}"
    )
    names = sorted({k for o in other for k in o})
    if names:
        text += "\n    compiled: " + "; ".join(names[:12])
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="vanilla,plugin,flagos-deny-cuda")
    parser.add_argument("--modes", default="eager,compile")
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--flagcx-path", help="FLAGCX_PATH of configuration flagcx")
    parser.add_argument(
        "--expert-parallel",
        action="store_true",
        help="the MoE layers' experts split across the GPUs (vLLM's enable_expert_parallel)",
    )
    add_engine_arguments(parser, shape="llama3-8b", input_len=128)
    parser.set_defaults(prompts=64, output_len=64)
    args = parser.parse_args(argv)
    configs = args.configs.split(",")
    unknown = [c for c in configs if c not in CONFIGS and c != "flagcx"]
    modes = args.modes.split(",")
    if unknown or any(m not in MODES for m in modes):
        parser.error(f"unknown configs {unknown} or modes {modes}")
    check_engine_arguments(parser, args)
    model = prepare_model(args.shape, args.layers, args.quant)
    results = []
    for mode in modes:
        base = None
        for name in configs:
            llm_args = {
                **model.llm_args(args.input_len, args.output_len),
                "tensor_parallel_size": args.tp,
                "enable_expert_parallel": args.expert_parallel,
                "profiler_config": profiler_config(False),
            }
            work = workload(model, mode, args, task=TASK, llm_args=llm_args)
            log = log_path(args.log_dir, "multi_gpu", name, mode)
            run = run_engine(
                name,
                model,
                work,
                _config_env(name, dict(args.env), args.flagcx_path),
                args.timeout,
                log,
            )
            result = {"config": name, "mode": mode, **run}
            results.append(result)
            print(_row(result, base), flush=True)
            if base is None:
                base = result
            if args.json:
                args.json.write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

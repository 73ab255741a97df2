"""Decode latency per token at small batches: vanilla vLLM against the plugin's policies.

    python -m benchmarks.latency --shape llama3-8b --configs vanilla,plugin,flagos-deny-cuda,vanilla \\
        --modes eager,compile --batches 1,8

Each configuration runs in vLLM's default process layout. Per batch size B, after a warm-up of
that size: B random prompts generate 1 token (prefill and the first token), then B fresh prompts
(no prefix-cache hit) generate ``1 + --output-len`` tokens; the difference over ``--output-len``
is the time of one decode step, the latency of each of the B sequences' next token. Repeated
``--repeats`` times; the median counts and the spread (min-max) is printed beside it, each ratio
with its bootstrap 95% interval over the repeats. A configuration named twice runs twice: its
second run against its first is the A/A control, printed beside every A/B ratio; an A/B ratio
shows a difference only where the A/A interval is within +-2% and the A/B interval excludes 1.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from benchmarks.engines import (
    MODES,
    add_engine_arguments,
    check_configs,
    check_engine_arguments,
    config_env,
    log_path,
    prepare_model,
    run_engine,
    workload,
)
from benchmarks.timing import bootstrap_ratio_ci

TASK = "benchmarks.latency:latency_task"


def latency_task(llm, work) -> dict:
    """Per batch size of ``work.task_options["batches"]``: decode ms per step, each repeat."""
    from vllm_fl.testing.engine import prompts, sampling_params

    options = work.task_options
    steps = work.max_tokens
    first = sampling_params(1, work.detokenize)
    longer = sampling_params(1 + steps, work.detokenize)
    seed = 0

    def fresh(count: int) -> list[dict]:
        nonlocal seed
        seed += 1
        return prompts(replace(work, num_prompts=count), seed)

    def timed(batch, params) -> float:
        start = time.perf_counter()
        llm.generate(batch, params, use_tqdm=False)
        return time.perf_counter() - start

    per_batch = {}
    for size in options["batches"]:
        # warm-up of both timed kinds at this batch size: its shapes, graphs and JIT kernels
        timed(fresh(size), first)
        timed(fresh(size), longer)
        step_ms = []
        for _ in range(options["repeats"]):
            prefill = timed(fresh(size), first)
            whole = timed(fresh(size), longer)
            step_ms.append(round((whole - prefill) / steps * 1e3, 4))
        per_batch[str(size)] = step_ms
    return {"step_ms": per_batch}


def _summary(step_ms: list[float]) -> str:
    return f"{statistics.median(step_ms):7.3f} ms [{min(step_ms):.3f}-{max(step_ms):.3f}]"


def _ratio(step_ms: list[float], base_ms: list[float]) -> str:
    """median ratio and its bootstrap 95% interval over the repeats"""
    ratio = statistics.median(step_ms) / statistics.median(base_ms)
    low, high = bootstrap_ratio_ci(step_ms, base_ms)
    return f"{ratio:.3f}x [{low:.3f}-{high:.3f}]"


def _row(result: dict, base: dict | None, control: dict | None) -> str:
    head = f"{result['label']:<22} {result['mode']:<8}"
    if "error" in result:
        return f"{head} error: {result['error'][:300]}"
    cells = []
    for size, step_ms in result["step_ms"].items():
        cell = f"B={size}: {_summary(step_ms)}"
        for name, other in (("vs first", base), ("A/A", control)):
            if other is not None and other is not result and "error" not in other:
                cell += f" {name} {_ratio(step_ms, other['step_ms'][size])}"
        cells.append(cell)
    return f"{head} " + "; ".join(cells)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="vanilla,plugin,flagos-deny-cuda,vanilla")
    parser.add_argument("--modes", default="eager,compile")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path)
    add_engine_arguments(parser, shape="llama3-8b", input_len=128)
    parser.set_defaults(output_len=64)
    args = parser.parse_args(argv)
    configs = args.configs.split(",")
    check_configs(parser, configs)
    modes = args.modes.split(",")
    if any(m not in MODES for m in modes):
        parser.error(f"--modes {args.modes}: allowed {', '.join(MODES)}")
    check_engine_arguments(parser, args)
    batches = [int(b) for b in args.batches.split(",")]
    model = prepare_model(args.shape, args.layers, args.quant)
    results = []
    for mode in modes:
        seen: dict[str, dict] = {}
        base = None
        for index, name in enumerate(configs):
            llm_args = model.llm_args(args.input_len, args.output_len + 1)
            llm_args["max_num_seqs"] = max(batches)
            work = workload(
                model,
                mode,
                args,
                task=TASK,
                llm_args=llm_args,
                task_options={"batches": batches, "repeats": args.repeats},
            )
            label = name if name not in seen else f"{name} (again)"
            log = log_path(args.log_dir, "latency", args.shape, name, mode, index)
            run = run_engine(name, model, work, config_env(name, dict(args.env)), args.timeout, log)
            result = {"config": name, "label": label, "mode": mode, **run}
            results.append(result)
            print(_row(result, base, seen.get(name)), flush=True)
            seen.setdefault(name, result)
            base = base or result
            if args.json:
                args.json.write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

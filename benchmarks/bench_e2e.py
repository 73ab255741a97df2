"""End-to-end serving throughput of real vLLM with and without the plugin.

A Llama-3-8B-shaped model (or, with --shape qwen3-moe, Qwen3-30B-A3B's MoE shape) with dummy
weights (no download: a config.json and `load_format="dummy"`), bf16, 256 prompts x 512 input /
128 output tokens, greedy; the model sizes come from benchmarks/shapes.py. For each
configuration and mode it starts a fresh Python process (vllm_runner.py, so plugin loading and
environment are clean) in vLLM's default process layout (the engine core in its own process;
--in-process for one process), measures engine startup and generation time,
compares the greedy tokens of the first prompts with vanilla vLLM's, and prints a table:

    configs: vanilla (VLLM_PLUGINS excludes ours), plugin (shipped policy),
             prefer=flagos, prefer=reference, flagos-deny-cuda (FlagGems with the cuda vendor
             denied: what a chip without vendor kernels runs); on request
             compile_prefer=vendor (the shipped policy with vLLM's CUDA kernels as opaque ops
             under torch.compile too)
    modes:   eager (enforce_eager=True), compile (vLLM's default torch.compile + CUDA graphs)

    python benchmarks/bench_e2e.py --modes eager,compile --repeat 3 --json e2e.json
    python benchmarks/bench_e2e.py --summarize e2e.json [more.json ...]

Runs are interleaved (round 1 of every config, then round 2, ...) and the table reports the
median of the rounds: the host's CPU speed drifts between processes on a shared machine, and
vLLM's eager mode is bound by it (one run of the same config may be 30% slower than the next).
With --timed-repeats N an engine times N batches, each of prompts of its own (the same prompts
again would come from vLLM's prefix cache), and its figure is the fastest: more samples for the
price of one engine start-up.
Each run therefore also reports a host-speed probe, microseconds per ``torch.empty`` on the GPU,
so a slow run can be told from a slow configuration. Besides the 512-token prompts, each run times
a decode-heavy batch (16-token prompts, same output length), the regime where per-op launch cost
shows most.

Each plugin run also reports the dispatch's record of which impl ran for every op, and which
vLLM layer classes were replaced.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import (
    Column,
    int_list,
    median,
    name_list,
    read_json,
    refuse_unknown,
    text_table,
    write_json,
)
from shapes import MODELS, QUANTIZATIONS, model_config
from vllm_harness import launch
from vllm_runner import Workload
from vllm_runner import run as run_in_process

CONFIGS = {
    "vanilla": {"VLLM_PLUGINS": "none"},
    "plugin": {},
    "prefer=flagos": {"VLLM_FL_PREFER": "flagos"},
    # What a chip without vendor kernels runs: FlagGems, else the reference; vLLM's Triton
    # attention instead of FlashAttention.
    "flagos-deny-cuda": {"VLLM_FL_PREFER": "flagos", "VLLM_FL_DENY_VENDORS": "cuda"},
    "prefer=reference": {"VLLM_FL_PREFER": "reference"},
    # FlagGems for every op but the MoE experts (vLLM's fused_moe): what the experts cost.
    "flagos-vendor-experts": {
        "VLLM_FL_PREFER": "flagos",
        "VLLM_FL_FLAGOS_BLACKLIST": "fused_experts",
    },
    # The shipped policy but with vLLM's CUDA kernels (opaque custom ops) under torch.compile too.
    "compile_prefer=vendor": {"VLLM_FL_COMPILE_PREFER": "vendor"},
}
MODES = ("eager", "compile")
#: greedy tokens of this many prompts are kept, to compare configurations
COMPARED_PROMPTS = 4
#: what a run reports beyond its figures (left out of the progress lines)
DETAIL_KEYS = (
    "dispatch_log",
    "used_impls",
    "used_impls_traced",
    "replaced",
    "tokens",
    "threads_cpu_s",
)


def shape_model_dir(shape: str, layers: int | None, quant: str | None = None) -> str:
    """A temporary model directory holding only the config.json of `shape` (dummy weights), as a
    checkpoint of format `quant` if given."""
    model_dir = tempfile.mkdtemp(prefix=f"{shape}-shape-")
    write_json(Path(model_dir, "config.json"), model_config(shape, layers, quant))
    return model_dir


def dummy_model_args(input_len: int, output_len: int) -> dict:
    """vllm.LLM's keyword arguments for the shape's model with dummy weights in bf16, no
    tokenizer, room for one prompt of `input_len` and `output_len` tokens."""
    return {
        "load_format": "dummy",
        "skip_tokenizer_init": True,
        "dtype": "bfloat16",
        "max_model_len": input_len + output_len,
        "gpu_memory_utilization": 0.85,
    }


def workload(mode: str, args) -> Workload:
    """One run: the model with dummy weights in bf16, random token-id prompts, a decode batch."""
    return Workload(
        mode=mode,
        max_tokens=args.output_len,
        num_prompts=args.prompts,
        prompt_len=args.input_len,
        decode_prompt_len=args.decode_input_len,
        warmup_prompts=COMPARED_PROMPTS,
        timed_repeats=args.timed_repeats,
        host_probe=True,
        watch_engine=args.watch_engine,
        llm_args=dummy_model_args(args.input_len, args.output_len),
    )


def e2e_result(raw: dict) -> dict:
    """A run's entry in the results: the runner's report as throughputs."""
    elapsed = raw["generate_s"]
    generated = raw["output_tokens"]
    result = {
        "startup_s": round(raw["import_s"] + raw["init_s"], 1),
        "generate_s": round(elapsed, 2),
        "output_tok_s": round(generated / elapsed, 1),
        "total_tok_s": round((generated + raw["prompt_tokens"]) / elapsed, 1),
        "decode_tok_s": round(raw["decode_tokens"] / raw["decode_s"], 1),
        "host_us": round(raw["host_us"], 2),
        "tokens": raw["tokens"][:COMPARED_PROMPTS],
    }
    for key in (
        "generate_s_all",
        "decode_s_all",
        "used_impls",
        "used_impls_traced",
        "replaced",
        "threads_cpu_s",
        "engine",
    ):
        if key in raw:
            result[key] = raw[key]
    return result


def config_env(name: str, **extra: str) -> dict[str, str]:
    """The environment of a vLLM process running configuration ``name``: this one, the
    configuration's variables and ``extra`` on top, FlashInfer's sampler off unless set."""
    env = {**os.environ, **CONFIGS[name], **extra}
    env.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
    return env


def add_model_arguments(parser: argparse.ArgumentParser, input_len: int) -> None:
    """The shape (and its layer count) and the batch of an end-to-end run."""
    parser.add_argument("--shape", choices=sorted(MODELS), default="llama3-8b")
    parser.add_argument("--layers", type=int, help="fewer decoder layers than the shape has")
    parser.add_argument(
        "--quant", choices=sorted(QUANTIZATIONS), help="a quantized checkpoint of this format"
    )
    parser.add_argument("--prompts", type=int, default=256)
    parser.add_argument("--input-len", type=int, default=input_len)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--decode-input-len", type=int, default=16)


def run_one(name: str, mode: str, round_no: int, model_dir: str, args) -> dict:
    in_process = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"} if args.in_process else {}
    env = config_env(name, **in_process)
    head = {"config": name, "mode": mode, "round": round_no}
    try:
        run = launch(model_dir, workload(mode, args), env, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        # a run that outlives --timeout is a result of the sweep, not the end of it
        return {**head, "error": f"timed out after {args.timeout} s", "wall_s": args.timeout}
    log = Path(args.log_dir) / f"e2e_{name.replace('=', '_')}_{mode}_{round_no}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(run.output)
    if not run.ok:
        return {**head, "error": " | ".join(run.tail(5))[-400:], "wall_s": run.wall_s}
    result = e2e_result(run.result)
    lines = dispatch_lines(run.output)
    if not result.get("used_impls") and lines:
        # The model ran in vLLM's engine process: its dispatch log says what it selected.
        result["used_impls"] = impls_from_log(lines, traced=False)
        if mode == "compile":
            result["used_impls_traced"] = {
                **result["used_impls"],
                **impls_from_log(lines, traced=True),
            }
    result["spawn_forced"] = "must use the spawn" in run.output
    return {**head, "wall_s": round(run.wall_s, 1), **result, "dispatch_log": lines}


def dispatch_lines(output: str) -> list[str]:
    """The dispatch's "Op '<op>' using ..." and fallback lines of a run's output."""
    return [
        line.split("] ", 1)[-1]
        for line in output.splitlines()
        if "Op '" in line and ("using" in line or "fallback" in line)
    ]


def impls_from_log(lines: list[str], traced: bool) -> dict[str, str]:
    """op -> impl id from the dispatch's "Op '<op>' using '<impl>'" lines (the last one wins),
    those for calls traced by torch.compile ("... under torch.compile") or the others."""
    found: dict[str, str] = {}
    for line in lines:
        match = re.search(r"Op '([^']+)' using '([^']+)'( under torch.compile)?", line)
        if match and bool(match.group(3)) == traced:
            found[match.group(1)] = match.group(2)
    return dict(sorted(found.items()))


def summarize(runs: list[dict]) -> list[dict]:
    """One row per (config, mode), in first-seen order: medians over the rounds."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in runs:
        groups.setdefault((r["config"], r["mode"]), [])
        if "error" not in r:
            groups[(r["config"], r["mode"])].append(r)
    rows = []
    for (config, mode), ok in groups.items():
        row = {"config": config, "mode": mode, "runs": len(ok)}
        if ok:
            for key in ("startup_s", "output_tok_s", "total_tok_s", "decode_tok_s", "host_us"):
                values = [r[key] for r in ok if key in r]
                row[key] = round(median(values), 2) if values else None
            row["output_range"] = (
                min(r["output_tok_s"] for r in ok),
                max(r["output_tok_s"] for r in ok),
            )
        rows.append(row)
    base = {row["mode"]: row for row in rows if row["config"] == "vanilla" and row["runs"]}
    for row in rows:
        ref = base.get(row["mode"])
        if row["runs"] and ref:
            row["vs_vanilla"] = round(row["output_tok_s"] / ref["output_tok_s"], 3)
            row["decode_vs_vanilla"] = round(row["decode_tok_s"] / ref["decode_tok_s"], 3)
    return rows


def format_table(rows: list[dict]) -> str:
    """The rows of `summarize` as a terminal table."""

    def ratio(value: float | None) -> str | None:
        return None if value is None else f"{value:.3f}x"

    columns = [
        Column("config", align="<"),
        Column("mode", align="<"),
        Column("runs"),
        Column("startup s", ".1f"),
        Column("output tok/s", ".1f"),
        Column("(min-max)"),
        Column("total tok/s", ".1f"),
        Column("vs vanilla"),
        Column("decode tok/s", ".1f"),
        Column("vs vanilla"),
        Column("host us", ".2f"),
    ]
    cells = []
    for r in rows:
        if not r["runs"]:
            cells.append([r["config"], r["mode"], 0] + [None] * (len(columns) - 3))
            continue
        lo, hi = r["output_range"]
        cells.append(
            [
                r["config"],
                r["mode"],
                r["runs"],
                r["startup_s"],
                r["output_tok_s"],
                f"({lo:.0f}-{hi:.0f})",
                r["total_tok_s"],
                ratio(r.get("vs_vanilla")),
                r["decode_tok_s"],
                ratio(r.get("decode_vs_vanilla")),
                r["host_us"],
            ]
        )
    failed = [
        f"{r['config']} {r['mode']}: every run failed (see the logs)" for r in rows if not r["runs"]
    ]
    return "\n".join([text_table(columns, cells), *failed])


def report(runs: list[dict]) -> None:
    print(format_table(summarize(runs)))
    seen = set()
    for r in runs:
        key = (r["config"], r["mode"])
        if r.get("used_impls") and key not in seen:
            seen.add(key)
            print(f"{r['config']} {r['mode']}: {r['used_impls']}")
            if r.get("used_impls_traced", r["used_impls"]) != r["used_impls"]:
                print(
                    f"{r['config']} {r['mode']}, traced by torch.compile: {r['used_impls_traced']}"
                )
    vanilla = {r["mode"]: r["tokens"] for r in runs if r["config"] == "vanilla" and "tokens" in r}
    for r in runs:
        if r["config"] != "vanilla" and "tokens" in r and r["mode"] in vanilla:
            same = r["tokens"] == vanilla[r["mode"]]
            print(
                f"greedy tokens of {r['config']} {r['mode']} round {r['round']}: "
                f"{'identical to' if same else 'DIFFERENT from'} vanilla"
            )
        if r.get("spawn_forced"):
            print(f"{r['config']} {r['mode']}: vLLM forced the spawn start method")
    for r in runs:
        if "error" in r:
            print(f"error: {r['config']} {r['mode']} round {r['round']}: {r['error']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", metavar="MODEL_DIR", help="run one configuration here")
    parser.add_argument("--mode", default="eager", choices=MODES)
    parser.add_argument("--modes", type=name_list, default=",".join(MODES))
    parser.add_argument(
        "--configs", type=name_list, default="vanilla,plugin,prefer=flagos,prefer=reference"
    )
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds per config")
    parser.add_argument(
        "--timed-repeats",
        type=int,
        default=1,
        help="batches timed per engine (each with prompts of its own); the fastest counts",
    )
    add_model_arguments(parser, input_len=512)
    parser.add_argument("--timeout", type=int, default=400)
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/e2e.json"))
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="VLLM_ENABLE_V1_MULTIPROCESSING=0 (default: vLLM's own process layout)",
    )
    parser.add_argument(
        "--watch-engine",
        action="store_true",
        help="report the engine process's garbage-collector pauses and allocator retries",
    )
    parser.add_argument("--log-dir", default="benchmarks/results/logs")
    parser.add_argument(
        "--summarize",
        nargs="+",
        type=Path,
        metavar="JSON",
        help="print the table of earlier runs (several files are merged)",
    )
    args = parser.parse_args(argv)

    if args.worker:
        result = e2e_result(run_in_process(args.worker, workload(args.mode, args)))
        print("E2E_RESULT " + json.dumps(result), flush=True)
        return 0
    if args.summarize:
        report([r for path in args.summarize for r in read_json(path)])
        return 0

    refuse_unknown(parser, "--configs", args.configs, CONFIGS)
    refuse_unknown(parser, "--modes", args.modes, MODES)
    model_dir = shape_model_dir(args.shape, args.layers, args.quant)
    runs = []
    for mode in args.modes:
        for round_no in range(1, args.repeat + 1):
            for name in args.configs:
                r = run_one(name, mode, round_no, model_dir, args)
                runs.append(r)
                print(json.dumps({k: v for k, v in r.items() if k not in DETAIL_KEYS}), flush=True)
                write_json(args.json, runs)  # a sweep cut short keeps the runs it finished
    report(runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Accuracy on a real checkpoint: every policy against vanilla vLLM, per format and mode.

    python -m benchmarks.accuracy --checkpoint DIR [--configs vanilla,plugin,...]
        [--modes eager,compile] [--formats bf16,fp8] [--parallel N] [--gate 0.01] [--json OUT]
    (formats: bf16, fp8, f32, int8, w4a16, fp8-block)

Each configuration (`benchmarks.engines.CONFIGS`) runs `vllm_fl.testing.accuracy`'s task on the
checkpoint (`vllm_fl.testing.checkpoint`) in an engine of its own, in vLLM's default process
layout: greedy text of a few prompts, the perplexity of real passages and a cloze multiple-choice
task. Formats: ``bf16`` (the checkpoint in bfloat16) and ``fp8`` (the same weights quantised to
FP8 while loading, vLLM's ``quantization="fp8"``, the way that format's users make it from a
16-bit checkpoint); ``f32`` for a CPU; and quantized checkpoints made from the checkpoint's
weights (`QUANTIZED`: `vllm_fl.testing.checkpoint.quantized_checkpoint`, round-to-nearest in the
format's own layout, once, cached beside the real checkpoint): ``int8`` (compressed-tensors INT8
W8A8: int8 weights per output channel, int8 activations per token), ``w4a16`` (GPTQ: 4-bit
symmetric weights in groups of 64 input channels) and ``fp8-block`` (FP8 weights in 64 x 64
blocks, activations in groups of 64; DeepSeek's and Qwen's layout, whose 128 the model's hidden
size of 576 does not divide), all three run in bfloat16. Every configuration of a format runs
the same folder. Modes: ``eager`` and ``compile`` (vLLM's default, torch.compile and CUDA
graphs). Each run is compared with vanilla's run of the same format and mode:

- perplexity ratio over all passages (total negative log-likelihood over tokens, exponentiated);
- greedy agreement: prompts whose greedy tokens are identical, and the tokens generated before
  the first difference over the tokens vanilla generated;
- cloze accuracy and whether it lies within the task's noise of vanilla's (two standard errors
  of the difference).

With both modes, a control row per format compares vanilla compiled with vanilla eager: the same
model on other kernels (Inductor's fusions against vLLM's CUDA kernels), which shows how far
bfloat16 rounding alone moves these numbers.

The gate: exit status 1 when a perplexity ratio is off by more than ``--gate`` (default 1%) or a
run failed. ``--parallel`` engines run at once (a small model shares one GPU; each gets a fixed
KV cache, ``--kv-cache-gib``, so that no engine sizes its cache from memory another is using); a
run that fails beside the others is tried once more alone, and says so.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.engines import CONFIGS, run_in_parallel
from vllm_fl.testing import accuracy
from vllm_fl.testing.checkpoint import quantized_checkpoint
from vllm_fl.testing.engine import MODES as WORKLOAD_MODES
from vllm_fl.testing.engine import Workload
from vllm_fl.testing.launch import launch, vllm_env

#: format -> the `vllm.LLM` arguments of its runs. bfloat16 for the quantized checkpoints too:
#: vLLM's GPTQ method takes float16 or bfloat16, and this model's residual stream reaches about
#: 26000 (float32, three of the CPython passages), 40% of float16's largest value
FORMATS = {
    "bf16": {"dtype": "bfloat16"},
    "fp8": {"dtype": "bfloat16", "quantization": "fp8"},
    "f32": {"dtype": "float32"},
    "int8": {"dtype": "bfloat16"},
    "w4a16": {"dtype": "bfloat16"},
    "fp8-block": {"dtype": "bfloat16"},
}
#: format -> the quantized checkpoint it runs (a format of `vllm_fl.testing.formats`, made from
#: --checkpoint with the real checkpoint's group, `vllm_fl.testing.checkpoint.QUANT_GROUPS`);
#: the other formats run --checkpoint itself
QUANTIZED = {"int8": "int8-w8a8", "w4a16": "w4a16-gptq", "fp8-block": "fp8-block"}
TIMEOUT_S = 900.0


@dataclass(frozen=True)
class Run:
    config: str
    format: str
    mode: str


def _llm_args(fmt: str, kv_cache_gib: float | None) -> dict:
    args = {**accuracy.LLM_ARGS, **FORMATS[fmt]}
    if kv_cache_gib is not None:
        args["kv_cache_memory_bytes"] = int(kv_cache_gib * 2**30)
    return args


def run_one(run: Run, checkpoint: Path, kv_cache_gib: float | None, extra_env: dict) -> dict:
    """One engine: the accuracy task's result, or ``{"error": ...}`` with the output's tail."""
    workload = Workload(
        mode=run.mode,
        llm_args=_llm_args(run.format, kv_cache_gib),
        task=accuracy.TASK,
    )
    env = vllm_env({**CONFIGS[run.config], **extra_env})
    done = launch(checkpoint, workload, env, timeout=TIMEOUT_S)
    if not done.ok:
        # the root cause is logged by vLLM's engine process well above the traceback's end
        causes = [line for line in done.output.splitlines() if "Error" in line][-12:]
        return {
            "error": f"rc={done.returncode}",
            "tail": causes + done.tail(20),
            "wall_s": done.wall_s,
        }
    return {**done.result, "wall_s": done.wall_s}


def checkpoints(formats: list[str], checkpoint: Path) -> dict[str, Path]:
    """Each format's folder: `checkpoint`, or its quantized twin (`QUANTIZED`), made here once
    before any engine starts, so that engines running in parallel find it finished."""
    return {
        fmt: (
            quantized_checkpoint(QUANTIZED[fmt], source=checkpoint)
            if fmt in QUANTIZED
            else checkpoint
        )
        for fmt in formats
    }


def run_all(
    runs: list[Run], folders: dict[str, Path], parallel: int, kv_cache_gib, extra_env
) -> dict:
    """Every run on its format's folder (`folders`), ``parallel`` at once; a run that failed
    beside others is tried once more alone (``retried`` in its result), since engines starting
    together on one GPU can trip over each other where one alone does not."""

    def one(run: Run) -> dict:
        start = time.monotonic()
        result = run_one(run, folders[run.format], kv_cache_gib, extra_env)
        # as each run ends, so that a stage cut short by its time limit still shows what ran
        done = "FAILED" if "error" in result else f"perplexity {_ppl(result):.4f}"
        print(f"{run}: {done} ({time.monotonic() - start:.0f} s)", file=sys.stderr, flush=True)
        return result

    return run_in_parallel(runs, one, parallel, failed=lambda result: "error" in result)


def _ppl(result: dict) -> float:
    passages = result["perplexity"].values()
    nll = sum(p["nll"] for p in passages)
    tokens = sum(p["tokens"] for p in passages)
    return math.exp(nll / tokens)


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def compare(result: dict, vanilla: dict) -> dict:
    """``result`` against vanilla's run of the same format and mode."""
    mine, theirs = result["greedy"], vanilla["greedy"]
    identical = sum(a["token_ids"] == b["token_ids"] for a, b in zip(mine, theirs))
    prefix = sum(_common_prefix(a["token_ids"], b["token_ids"]) for a, b in zip(mine, theirs))
    generated = sum(len(b["token_ids"]) for b in theirs)
    acc, se = result["cloze"]["accuracy"], result["cloze"]["stderr"]
    acc0, se0 = vanilla["cloze"]["accuracy"], vanilla["cloze"]["stderr"]
    noise = 2 * math.sqrt(se**2 + se0**2)
    ppl, ppl_vanilla = _ppl(result), _ppl(vanilla)
    return {
        "ppl": ppl,
        "ppl_vanilla": ppl_vanilla,
        "ppl_ratio": ppl / ppl_vanilla,
        "identical": identical,
        "prompts": len(theirs),
        "prefix_tokens": prefix,
        "generated_tokens": generated,
        "cloze": acc,
        "cloze_stderr": se,
        "cloze_vanilla": acc0,
        "cloze_within_noise": abs(acc - acc0) <= noise,
        "impls": result.get("worker_used_impls", {}),
    }


def _controls(results: dict[Run, dict]) -> list[tuple[Run, dict]]:
    """Per format, vanilla compiled against vanilla eager: how far the same model moves when only
    the kernels change (Inductor's against vLLM's), the scale a policy's ratio is read on."""
    controls = []
    for run, result in results.items():
        eager = results.get(Run("vanilla", run.format, "eager"))
        if run.config != "vanilla" or run.mode != "compile" or eager is None:
            continue
        if "error" not in result and "error" not in eager:
            controls.append((Run("vanilla vs eager", run.format, run.mode), compare(result, eager)))
    return controls


def table(rows: list[tuple[Run, dict]]) -> str:
    width = max([6, *(len(run.format) for run, _ in rows)])  # fp8-block is longer than 6
    header = (
        f"{'format':<{width}} {'mode':<8} {'config':<18} {'ppl':>8} {'ratio':>8} "
        f"{'identical':>9} {'prefix tokens':>13}  {'cloze (vanilla)':<19} {'noise':<6}"
    )
    lines = [header, "-" * len(header)]
    for run, row in rows:
        start = f"{run.format:<{width}} {run.mode:<8} {run.config:<18}"
        if "error" in row:
            lines.append(f"{start} FAILED {row['error']}")
            continue
        lines.append(
            f"{start} {row['ppl']:>8.4f} "
            f"{row['ppl_ratio']:>8.5f} {row['identical']:>4}/{row['prompts']:<4} "
            f"{row['prefix_tokens']:>6}/{row['generated_tokens']:<6}  "
            f"{row['cloze']:.3f} ({row['cloze_vanilla']:.3f})    "
            f"{'within' if row['cloze_within_noise'] else 'OUTSIDE':<6}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.accuracy", description=__doc__)
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--configs", default="vanilla,plugin,prefer=flagos,flagos-deny-cuda")
    parser.add_argument("--modes", default="eager,compile")
    parser.add_argument("--formats", default="bf16,fp8")
    parser.add_argument("--parallel", type=int, default=1, help="engines at once")
    parser.add_argument("--kv-cache-gib", type=float, default=None)
    parser.add_argument("--gate", type=float, default=0.01, help="largest |ppl ratio - 1|")
    parser.add_argument(
        "--env", action="append", default=[], help="NAME=VALUE for every run (repeatable)"
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    configs = args.configs.split(",")
    unknown = [c for c in configs if c not in CONFIGS]
    unknown += [f for f in args.formats.split(",") if f not in FORMATS]
    if unknown or "vanilla" not in configs:
        parser.error(
            f"unknown configs/formats {unknown}; configs need 'vanilla' (allowed configs: "
            f"{', '.join(CONFIGS)}; formats: {', '.join(FORMATS)})"
        )
    bad_modes = [m for m in args.modes.split(",") if m not in WORKLOAD_MODES]
    if bad_modes:
        parser.error(
            f"--modes {args.modes!r}: unknown {bad_modes}; allowed: {', '.join(WORKLOAD_MODES)}"
        )
    extra_env = dict(item.split("=", 1) for item in args.env)
    formats = args.formats.split(",")
    runs = [Run(c, f, m) for f in formats for m in args.modes.split(",") for c in configs]
    folders = checkpoints(formats, args.checkpoint)
    for fmt, folder in folders.items():
        if fmt in QUANTIZED:
            print(f"{fmt}: {folder}", file=sys.stderr)
    results = run_all(runs, folders, args.parallel, args.kv_cache_gib, extra_env)
    rows: list[tuple[Run, dict]] = []
    failed = False
    for run in runs:
        if run.config == "vanilla":
            continue
        result = results[run]
        vanilla = results[Run("vanilla", run.format, run.mode)]
        if "error" in vanilla:
            rows.append((run, {"error": f"vanilla failed ({vanilla['error']})"}))
            failed = True
        elif "error" in result:
            rows.append((run, result))
            failed = True
        elif "vllm_fl" not in str(result.get("platform")):
            # a plugin configuration on vanilla's platform compares vanilla with itself
            error = f"the plugin did not load (platform {result.get('platform')}): not installed?"
            rows.append((run, {"error": error}))
            failed = True
        else:
            row = compare(result, vanilla)
            failed |= abs(row["ppl_ratio"] - 1) > args.gate
            rows.append((run, row))
    controls = _controls(results)
    for run, result in results.items():
        for attempt in (result, result.get("retried", {})):
            if "error" in attempt:
                print(f"{run}: {attempt['error']}\n" + "\n".join(attempt["tail"]), file=sys.stderr)
        if "retried" in result and "error" not in result:
            print(f"{run}: failed beside other engines, passed alone", file=sys.stderr)
    print(table(rows))
    if controls:
        print(
            "control, not gated: vanilla compiled against vanilla eager (other kernels, same model)"
        )
        print(table(controls))
    for run, result in results.items():
        if "error" not in result and run.config == "vanilla":
            texts = [g["text"] for g in result["greedy"]]
            print(f"vanilla {run.format} {run.mode} greedy: {json.dumps(texts)[:400]}")
    verdict = "FAIL" if failed else "pass"
    print(f"gate (|perplexity ratio - 1| <= {args.gate:g}, every run ok): {verdict}")
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "rows": [{**run.__dict__, **row} for run, row in rows],
                    "controls": [{**run.__dict__, **row} for run, row in controls],
                    "runs": [{**run.__dict__, **res} for run, res in results.items()],
                    "checkpoints": {fmt: str(folder) for fmt, folder in folders.items()},
                    "gate": args.gate,
                    "passed": not failed,
                },
                indent=1,
            )
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

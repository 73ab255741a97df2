"""End-to-end serving throughput of real vLLM with and without the plugin.

A Llama-3-8B-shaped model (or, with --shape qwen3-moe, Qwen3-30B-A3B's MoE shape) with dummy
weights (no download: a config.json and `load_format="dummy"`), bf16, 256 prompts x 512 input /
128 output tokens, greedy. For each configuration and mode it starts a fresh Python process (so
plugin loading and environment are clean) in vLLM's default process layout (the engine core in
its own process; --in-process for one process), measures engine startup and generation time,
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
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "hidden_act": "silu",
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
}

# Qwen3-30B-A3B's shape (48 layers there; --layers keeps fewer so dummy weights start fast).
QWEN3_MOE = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "norm_topk_prob": True,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "hidden_act": "silu",
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
}
SHAPES = {"llama3-8b": LLAMA3_8B, "qwen3-moe": QWEN3_MOE}

CONFIGS = {
    "vanilla": {"VLLM_PLUGINS": "none"},
    "plugin": {},
    "prefer=flagos": {"VLLM_FL_PREFER": "flagos"},
    # What a chip without vendor kernels runs: FlagGems, else the reference; vLLM's Triton
    # attention instead of FlashAttention.
    "flagos-deny-cuda": {"VLLM_FL_PREFER": "flagos", "VLLM_FL_DENY_VENDORS": "cuda"},
    "prefer=reference": {"VLLM_FL_PREFER": "reference"},
    # The shipped policy but with vLLM's CUDA kernels (opaque custom ops) under torch.compile too.
    "compile_prefer=vendor": {"VLLM_FL_COMPILE_PREFER": "vendor"},
}


def _host_probe_us(calls: int = 20000) -> float:
    """Microseconds per ``torch.empty(16, device="cuda")``: the speed of this process's host
    CPU for the kind of work an eager engine step consists of (small dispatcher calls)."""
    import torch

    torch.empty(16, device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        torch.empty(16, device="cuda")
    return (time.perf_counter() - t0) / calls * 1e6


def worker(model_dir: str, mode: str, args) -> dict:
    """Runs inside the child process: build the engine, generate, report."""
    import random

    started = time.perf_counter()
    from vllm import LLM, SamplingParams

    llm = LLM(
        model=model_dir,
        load_format="dummy",
        skip_tokenizer_init=True,
        dtype="bfloat16",
        max_model_len=args.input_len + args.output_len,
        enforce_eager=(mode == "eager"),
        gpu_memory_utilization=0.85,
        seed=0,
    )
    startup = time.perf_counter() - started
    rng = random.Random(0)
    batch = [
        {"prompt_token_ids": [rng.randrange(1000, 100000) for _ in range(args.input_len)]}
        for _ in range(args.prompts)
    ]
    params = SamplingParams(
        temperature=0.0, max_tokens=args.output_len, ignore_eos=True, detokenize=False
    )
    llm.generate(batch[:4], params, use_tqdm=False)  # warm-up outside the timed region
    t0 = time.perf_counter()
    outputs = llm.generate(batch, params, use_tqdm=False)
    elapsed = time.perf_counter() - t0
    generated = sum(len(o.outputs[0].token_ids) for o in outputs)
    first_tokens = [list(o.outputs[0].token_ids) for o in outputs[:4]]
    short = [{"prompt_token_ids": p["prompt_token_ids"][: args.decode_input_len]} for p in batch]
    t0 = time.perf_counter()
    decoded = llm.generate(short, params, use_tqdm=False)
    decode_elapsed = time.perf_counter() - t0
    result = {
        "startup_s": round(startup, 1),
        "generate_s": round(elapsed, 2),
        "output_tok_s": round(generated / elapsed, 1),
        "total_tok_s": round((generated + args.prompts * args.input_len) / elapsed, 1),
        "decode_tok_s": round(
            sum(len(o.outputs[0].token_ids) for o in decoded) / decode_elapsed, 1
        ),
        "host_us": round(_host_probe_us(), 2),
        "tokens": first_tokens,
    }
    try:
        from vllm_fl import compat
        from vllm_fl.dispatch import get_default_manager

        manager = get_default_manager()
        result["used_impls"] = dict(sorted(manager.used_impls().items()))
        if mode == "compile":
            result["used_impls_traced"] = dict(sorted(manager.used_impls(traced=True).items()))
        result["replaced"] = sorted(compat.oot_registry())
    except ImportError:
        pass
    return result


def run_one(name: str, mode: str, round_no: int, model_dir: str, args) -> dict:
    env = {**os.environ, **CONFIGS[name]}
    if args.in_process:
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    env.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
    cmd = [sys.executable, __file__, "--worker", model_dir, "--mode", mode]
    for flag in ("prompts", "input_len", "output_len", "decode_input_len"):
        cmd += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    t0 = time.perf_counter()
    head = {"config": name, "mode": mode, "round": round_no}
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        # a run that outlives --timeout is a result of the sweep, not the end of it
        return {**head, "error": f"timed out after {args.timeout} s", "wall_s": args.timeout}
    wall = time.perf_counter() - t0
    log = Path(args.log_dir) / f"e2e_{name.replace('=', '_')}_{mode}_{round_no}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(proc.stdout + proc.stderr)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("E2E_RESULT ")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        return {**head, "error": " | ".join(tail)[-400:], "wall_s": wall}
    result = json.loads(lines[-1][len("E2E_RESULT ") :])
    output = proc.stdout + proc.stderr
    dispatch_lines = [
        l.split("] ", 1)[-1]
        for l in output.splitlines()
        if "Op '" in l and ("using" in l or "fallback" in l)
    ]
    if not result.get("used_impls") and dispatch_lines:
        # The model ran in vLLM's engine process: its dispatch log says what it selected.
        result["used_impls"] = _impls_from_log(dispatch_lines, traced=False)
        if mode == "compile":
            result["used_impls_traced"] = {
                **result["used_impls"],
                **_impls_from_log(dispatch_lines, traced=True),
            }
    result["spawn_forced"] = "must use the spawn" in output
    return {**head, "wall_s": round(wall, 1), **result, "dispatch_log": dispatch_lines}


def _impls_from_log(lines: list[str], traced: bool) -> dict[str, str]:
    """op -> impl id from the dispatch's "Op '<op>' using '<impl>'" lines (the last one wins),
    those for calls traced by torch.compile ("... under torch.compile") or the others."""
    import re

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
                row[key] = round(statistics.median(values), 2) if values else float("nan")
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
    lines = [
        f"{'config':<23}{'mode':<9}{'runs':>5}{'startup s':>10}{'output tok/s':>14}"
        f"{'(min-max)':>18}{'total tok/s':>13}{'vs vanilla':>12}{'decode tok/s':>14}"
        f"{'vs vanilla':>12}{'host us':>9}"
    ]
    for r in rows:
        if not r["runs"]:
            lines.append(f"{r['config']:<23}{r['mode']:<9}  every run failed (see the logs)")
            continue
        lo, hi = r["output_range"]
        lines.append(
            f"{r['config']:<23}{r['mode']:<9}{r['runs']:>5}{r['startup_s']:>10.1f}"
            f"{r['output_tok_s']:>14.1f}{f'({lo:.0f}-{hi:.0f})':>18}{r['total_tok_s']:>13.1f}"
            f"{r.get('vs_vanilla', float('nan')):>11.3f}x{r['decode_tok_s']:>14.1f}"
            f"{r.get('decode_vs_vanilla', float('nan')):>11.3f}x{r['host_us']:>9.2f}"
        )
    return "\n".join(lines)


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
    parser.add_argument("--worker", metavar="MODEL_DIR")
    parser.add_argument("--mode", default="eager", choices=("eager", "compile"))
    parser.add_argument("--modes", default="eager,compile")
    parser.add_argument("--configs", default="vanilla,plugin,prefer=flagos,prefer=reference")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds per config")
    parser.add_argument("--prompts", type=int, default=256)
    parser.add_argument("--input-len", type=int, default=512)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--decode-input-len", type=int, default=16)
    parser.add_argument("--timeout", type=int, default=400)
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/e2e.json"))
    parser.add_argument("--shape", choices=sorted(SHAPES), default="llama3-8b")
    parser.add_argument("--layers", type=int, help="fewer decoder layers than the shape has")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="VLLM_ENABLE_V1_MULTIPROCESSING=0 (default: vLLM's own process layout)",
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
        result = worker(args.worker, args.mode, args)
        print("E2E_RESULT " + json.dumps(result), flush=True)
        return 0
    if args.summarize:
        report([r for path in args.summarize for r in json.loads(path.read_text())])
        return 0

    unknown = [c for c in args.configs.split(",") if c not in CONFIGS]
    if unknown:
        parser.error(f"--configs: unknown {unknown}; allowed: {', '.join(CONFIGS)}")
    model_dir = tempfile.mkdtemp(prefix=f"{args.shape}-shape-")
    config = dict(SHAPES[args.shape])
    if args.layers:
        config["num_hidden_layers"] = args.layers
    Path(model_dir, "config.json").write_text(json.dumps(config))
    runs = []
    for mode in args.modes.split(","):
        for round_no in range(1, args.repeat + 1):
            for name in args.configs.split(","):
                r = run_one(name, mode, round_no, model_dir, args)
                runs.append(r)
                print(
                    json.dumps(
                        {
                            k: v
                            for k, v in r.items()
                            if k
                            not in (
                                "dispatch_log",
                                "used_impls",
                                "used_impls_traced",
                                "replaced",
                                "tokens",
                            )
                        }
                    ),
                    flush=True,
                )
    report(runs)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

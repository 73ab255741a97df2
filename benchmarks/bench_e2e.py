"""End-to-end serving throughput of real vLLM with and without the plugin.

A Llama-3-8B-shaped model with dummy weights (no download: a config.json and
`load_format="dummy"`), bf16, 256 prompts x 512 input / 128 output tokens, greedy. For each
configuration and mode it starts a fresh Python process (so plugin loading and environment are
clean), measures engine startup and generation time, and prints a table:

    configs: vanilla (VLLM_PLUGINS excludes ours), plugin (shipped policy),
             prefer=flagos, prefer=reference
    modes:   eager (enforce_eager=True), compile (vLLM's default torch.compile + CUDA graphs)

    python benchmarks/bench_e2e.py --modes eager,compile --json benchmarks/results/e2e.json

Each plugin run also reports the dispatch's record of which impl ran for every op, and which
vLLM layer classes were replaced.
"""

from __future__ import annotations

import argparse
import json
import os
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

CONFIGS = {
    "vanilla": {"VLLM_PLUGINS": "none"},
    "plugin": {},
    "prefer=flagos": {"VLLM_FL_PREFER": "flagos"},
    "prefer=reference": {"VLLM_FL_PREFER": "reference"},
}


def worker(model_dir: str, mode: str, prompts: int, input_len: int, output_len: int) -> dict:
    """Runs inside the child process: build the engine, generate, report."""
    import random

    started = time.perf_counter()
    from vllm import LLM, SamplingParams

    llm = LLM(
        model=model_dir,
        load_format="dummy",
        skip_tokenizer_init=True,
        dtype="bfloat16",
        max_model_len=input_len + output_len,
        enforce_eager=(mode == "eager"),
        gpu_memory_utilization=0.85,
        seed=0,
    )
    startup = time.perf_counter() - started
    rng = random.Random(0)
    batch = [
        {"prompt_token_ids": [rng.randrange(1000, 100000) for _ in range(input_len)]}
        for _ in range(prompts)
    ]
    params = SamplingParams(
        temperature=0.0, max_tokens=output_len, ignore_eos=True, detokenize=False
    )
    llm.generate(batch[:4], params, use_tqdm=False)  # warm-up outside the timed region
    t0 = time.perf_counter()
    outputs = llm.generate(batch, params, use_tqdm=False)
    elapsed = time.perf_counter() - t0
    generated = sum(len(o.outputs[0].token_ids) for o in outputs)
    result = {
        "startup_s": round(startup, 1),
        "generate_s": round(elapsed, 2),
        "output_tok_s": round(generated / elapsed, 1),
        "total_tok_s": round((generated + prompts * input_len) / elapsed, 1),
    }
    try:
        from vllm_fl import compat
        from vllm_fl.dispatch import get_default_manager

        result["used_impls"] = dict(sorted(get_default_manager().used_impls().items()))
        result["replaced"] = sorted(compat.oot_registry())
    except ImportError:
        pass
    return result


def run_one(name: str, mode: str, model_dir: str, args) -> dict:
    env = {**os.environ, **CONFIGS[name], "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    env.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        model_dir,
        "--mode",
        mode,
        "--prompts",
        str(args.prompts),
        "--input-len",
        str(args.input_len),
        "--output-len",
        str(args.output_len),
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    wall = time.perf_counter() - t0
    log = Path(args.log_dir) / f"e2e_{name.replace('=', '_')}_{mode}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(proc.stdout + proc.stderr)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("E2E_RESULT ")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        return {"config": name, "mode": mode, "error": " | ".join(tail)[-400:], "wall_s": wall}
    result = json.loads(lines[-1][len("E2E_RESULT ") :])
    dispatch_lines = [
        l.split("] ", 1)[-1]
        for l in proc.stderr.splitlines()
        if "Op '" in l and ("using" in l or "fallback" in l)
    ]
    return {
        "config": name,
        "mode": mode,
        "wall_s": round(wall, 1),
        **result,
        "dispatch_log": dispatch_lines,
    }


def format_table(results: list[dict]) -> str:
    base = {r["mode"]: r.get("output_tok_s") for r in results if r["config"] == "vanilla"}
    lines = [
        f"{'config':<18}{'mode':<9}{'startup s':>10}{'output tok/s':>14}"
        f"{'total tok/s':>13}{'vs vanilla':>12}"
    ]
    for r in results:
        if "error" in r:
            lines.append(f"{r['config']:<18}{r['mode']:<9}  error: {r['error']}")
            continue
        ratio = r["output_tok_s"] / base[r["mode"]] if base.get(r["mode"]) else float("nan")
        lines.append(
            f"{r['config']:<18}{r['mode']:<9}{r['startup_s']:>10.1f}"
            f"{r['output_tok_s']:>14.1f}{r['total_tok_s']:>13.1f}{ratio:>11.3f}x"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", metavar="MODEL_DIR")
    parser.add_argument("--mode", default="eager", choices=("eager", "compile"))
    parser.add_argument("--modes", default="eager,compile")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--prompts", type=int, default=256)
    parser.add_argument("--input-len", type=int, default=512)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--timeout", type=int, default=400)
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/e2e.json"))
    parser.add_argument("--log-dir", default="benchmarks/results/logs")
    args = parser.parse_args(argv)

    if args.worker:
        result = worker(args.worker, args.mode, args.prompts, args.input_len, args.output_len)
        print("E2E_RESULT " + json.dumps(result), flush=True)
        return 0

    model_dir = tempfile.mkdtemp(prefix="llama3-8b-shape-")
    Path(model_dir, "config.json").write_text(json.dumps(LLAMA3_8B))
    results = []
    for mode in args.modes.split(","):
        for name in args.configs.split(","):
            r = run_one(name, mode, model_dir, args)
            results.append(r)
            print(json.dumps({k: v for k, v in r.items() if k != "dispatch_log"}), flush=True)
    print(format_table(results))
    for r in results:
        if r.get("used_impls"):
            print(f"{r['config']} {r['mode']}: {r['used_impls']}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    previous = json.loads(args.json.read_text()) if args.json.exists() else []
    keep = [
        p
        for p in previous
        if (p["config"], p["mode"]) not in {(r["config"], r["mode"]) for r in results}
    ]
    args.json.write_text(json.dumps(keep + results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

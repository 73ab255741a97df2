"""Real vLLM (CPU build) on the tiny random Llama, with and without the plugin, eager and compiled.

Each configuration runs in a fresh interpreter (tests/integration/vllm_runner.py): vLLM without
the plugin (`VLLM_PLUGINS=none`) and with it in the CPU host mode (`VLLM_PLUGINS=fl`,
`VLLM_FL_PLATFORM=cpu`, reference backend), in `enforce_eager=True` and in vLLM's default
compile mode. Prints a table (wall time of the whole run, engine start-up, generation time,
output tokens/s) and writes it as JSON. Timings on a shared 2-core machine are noisy: use
--repeat to take the best of several runs.

    .venv/bin/python benchmarks/bench_e2e_cpu.py [--prompts 32] [--max-tokens 64] [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from tiny_model import build_tiny_llama  # noqa: E402
from vllm_harness import PLUGIN_OFF, PLUGIN_ON, run_vllm  # noqa: E402

CONFIGS = [
    ("eager", "vLLM", PLUGIN_OFF),
    ("eager", "vLLM + vllm_fl", PLUGIN_ON),
    ("compile", "vLLM", PLUGIN_OFF),
    ("compile", "vLLM + vllm_fl", PLUGIN_ON),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=1, help="runs per configuration (best)")
    parser.add_argument("--json", default=str(ROOT / "out" / "bench_e2e_cpu.json"))
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model = build_tiny_llama(Path(tmp) / "tiny-llama")
        for mode, label, env in CONFIGS:
            runs = [
                run_vllm(
                    model, env, mode=mode, max_tokens=args.max_tokens, num_prompts=args.prompts
                )
                for _ in range(args.repeat)
            ]
            best = max(runs, key=lambda r: r.result["tokens_per_s"])
            r = best.result
            rows.append(
                {
                    "mode": mode,
                    "config": label,
                    "platform": r["platform"],
                    "wall_s": round(min(x.wall_s for x in runs), 1),
                    "engine_start_s": r["init_s"],
                    "generate_s": r["generate_s"],
                    "output_tokens": r["output_tokens"],
                    "tokens_per_s": r["tokens_per_s"],
                    "used_impls": r.get("used_impls", {}),
                    "tokens_match_vanilla": None,
                    "_tokens": r["tokens"],
                }
            )
    for row in rows:
        vanilla = next(x for x in rows if x["mode"] == row["mode"] and x["config"] == "vLLM")
        row["tokens_match_vanilla"] = row["_tokens"] == vanilla["_tokens"]
    for row in rows:
        del row["_tokens"]

    print(
        f"tiny Llama (hidden 64, 2 layers), float32, {args.prompts} prompts x "
        f"{args.max_tokens} output tokens, greedy, best of {args.repeat}"
    )
    header = f"{'mode':<8} {'config':<16} {'wall s':>7} {'start s':>8} {'gen s':>7} {'tok/s':>8}"
    print(header + "  same tokens")
    print("-" * (len(header) + 13))
    for row in rows:
        print(
            f"{row['mode']:<8} {row['config']:<16} {row['wall_s']:>7.1f} "
            f"{row['engine_start_s']:>8.1f} {row['generate_s']:>7.3f} {row['tokens_per_s']:>8.1f}"
            f"  {row['tokens_match_vanilla']}"
        )
    for mode in ("eager", "compile"):
        plain, ours = (x for x in rows if x["mode"] == mode)
        print(
            f"{mode}: plugin / vanilla tokens/s = {ours['tokens_per_s'] / plain['tokens_per_s']:.2f}"
        )
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

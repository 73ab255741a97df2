"""Real vLLM (CPU build) on the tiny random Llama, with and without the plugin, eager and compiled.

Each configuration runs in a fresh interpreter (benchmarks/vllm_runner.py): vLLM without
the plugin (`VLLM_PLUGINS=none`) and with it in the CPU host mode (`VLLM_PLUGINS=fl`,
`VLLM_FL_PLATFORM=cpu`, reference backend), in `enforce_eager=True` and in vLLM's default
compile mode. Prints a table (wall time of the whole run, engine start-up, generation time,
output tokens/s) and writes it as JSON. Timings on a shared 2-core machine are noisy: use
--repeat to take the best of several runs.

    .venv/bin/python benchmarks/bench_e2e_cpu.py [--prompts 32] [--max-tokens 64] [--repeat 1]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from harness import Column, text_table, write_json
from tiny_model import build_tiny_llama
from vllm_harness import PLUGIN_OFF, PLUGIN_ON, run_vllm

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = [
    ("eager", "vLLM", PLUGIN_OFF),
    ("eager", "vLLM + vllm_fl", PLUGIN_ON),
    ("compile", "vLLM", PLUGIN_OFF),
    ("compile", "vLLM + vllm_fl", PLUGIN_ON),
]


def measure(model: Path, prompts: int, max_tokens: int, repeat: int, runner=run_vllm) -> list[dict]:
    """One row per configuration: the best of `repeat` runs, and whether its greedy tokens are
    vanilla vLLM's in the same mode."""
    rows, tokens = [], []
    for mode, label, env in CONFIGS:
        runs = [
            runner(model, env, mode=mode, max_tokens=max_tokens, num_prompts=prompts)
            for _ in range(repeat)
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
            }
        )
        tokens.append(r["tokens"])
    for row, own in zip(rows, tokens):
        vanilla = next(
            t for x, t in zip(rows, tokens) if x["mode"] == row["mode"] and x["config"] == "vLLM"
        )
        row["tokens_match_vanilla"] = own == vanilla
    return rows


def format_table(rows: list[dict]) -> str:
    columns = [
        Column("mode", align="<"),
        Column("config", align="<"),
        Column("wall s", ".1f"),
        Column("start s", ".1f"),
        Column("gen s", ".3f"),
        Column("tok/s", ".1f"),
        Column("same tokens", align="<"),
    ]
    cells = [
        (
            r["mode"],
            r["config"],
            r["wall_s"],
            r["engine_start_s"],
            r["generate_s"],
            r["tokens_per_s"],
            str(r["tokens_match_vanilla"]),
        )
        for r in rows
    ]
    lines = [text_table(columns, cells)]
    for mode in dict.fromkeys(r["mode"] for r in rows):
        plain, ours = (x for x in rows if x["mode"] == mode)
        ratio = ours["tokens_per_s"] / plain["tokens_per_s"]
        lines.append(f"{mode}: plugin / vanilla tokens/s = {ratio:.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=1, help="runs per configuration (best)")
    parser.add_argument("--json", default=str(ROOT / "out" / "bench_e2e_cpu.json"))
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        model = build_tiny_llama(Path(tmp) / "tiny-llama")
        rows = measure(model, args.prompts, args.max_tokens, args.repeat)
    print(
        f"tiny Llama (hidden 64, 2 layers), float32, {args.prompts} prompts x "
        f"{args.max_tokens} output tokens, greedy, best of {args.repeat}"
    )
    print(format_table(rows))
    write_json(Path(args.json), {"args": vars(args), "rows": rows})
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

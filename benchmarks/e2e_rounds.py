"""End-to-end A/B design ``rounds``: fresh engines per configuration, in interleaved rounds.

For each mode and round it starts every configuration's engine in turn (round 1 of every
configuration, then round 2, ...), each a fresh process in vLLM's default process layout
(``--in-process`` for one process), generates the timed batches and a decode-heavy batch (the
prompts cut to ``--decode-input-len`` tokens, where per-op launch cost shows most), and reports
the median of the rounds: the host's speed drifts between processes on a shared machine and an
eager engine is bound by it. With ``--timed-repeats N`` an engine times N batches, each of prompts
of its own, and its figure is the fastest: more samples for the price of one engine start-up.
Each run also reports a host-speed probe (microseconds per ``torch.empty`` on the GPU), the
dispatch's record of which impl ran for every op, and whether its greedy tokens are vanilla
vLLM's.
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.cli import read_json, write_json
from benchmarks.engines import IN_PROCESS, Model, config_env, log_path, run_engine, workload
from benchmarks.tables import Column, text_table
from benchmarks.timing import median

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


def e2e_result(raw: dict) -> dict:
    """A run's entry in the results: the runner's report as throughputs."""
    elapsed = raw["generate_s"]
    generated = raw["output_tokens"]
    result = {
        "startup_s": round(raw["import_s"] + raw["init_s"], 1),
        "generate_s": round(elapsed, 2),
        "output_tok_s": round(generated / elapsed, 1),
        "total_tok_s": round((generated + raw["prompt_tokens"]) / elapsed, 1),
        "tokens": raw["tokens"][:COMPARED_PROMPTS],
    }
    if "decode_s" in raw:
        result["decode_tok_s"] = round(raw["decode_tokens"] / raw["decode_s"], 1)
    if "host_us" in raw:
        result["host_us"] = round(raw["host_us"], 2)
    for key in (
        "generate_s_all",
        "decode_s_all",
        "used_impls",
        "used_impls_traced",
        "replaced",
        "threads_cpu_s",
        "engine",
        "wall_s",
        "dispatch_log",
        "spawn_forced",
    ):
        if key in raw:
            result[key] = raw[key]
    return result


def run_one(name: str, mode: str, round_no: int, model: Model, args) -> dict:
    """One engine of configuration `name` in `mode`: its figures, or its error."""
    extra = {**dict(args.env), **(IN_PROCESS if args.in_process else {})}
    work = workload(
        model,
        mode,
        args,
        decode_prompt_len=None if model.tiny else args.decode_input_len,
        warmup_prompts=COMPARED_PROMPTS,
        timed_repeats=args.timed_repeats,
        host_probe=not model.tiny,
        watch_engine=args.watch_engine,
    )
    log = log_path(args.log_dir, "e2e", name, mode, round_no)
    raw = run_engine(name, model, work, config_env(name, extra), args.timeout, log)
    head = {"config": name, "mode": mode, "round": round_no}
    if "error" in raw:
        return {**head, **raw}
    return {**head, **e2e_result(raw)}


def run_design(model: Model, args) -> list[dict]:
    """Every configuration and mode of `args` in interleaved rounds; the runs, written to
    ``args.json`` as they come (a sweep cut short keeps the runs it finished)."""
    runs = []
    for mode in args.modes:
        for round_no in range(1, args.repeat + 1):
            for name in args.configs:
                r = run_one(name, mode, round_no, model, args)
                runs.append(r)
                print(json.dumps({k: v for k, v in r.items() if k not in DETAIL_KEYS}), flush=True)
                write_json(args.json, runs)
    report(runs)
    return runs


def summarize_files(paths: list[Path]) -> None:
    """Print the table of earlier runs (several files are merged)."""
    report([r for path in paths for r in read_json(path)])


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
            if row.get("decode_tok_s") and ref.get("decode_tok_s"):
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
                r.get("decode_tok_s"),
                ratio(r.get("decode_vs_vanilla")),
                r.get("host_us"),
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

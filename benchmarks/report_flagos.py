"""Docs renderers of the flagos path's measurements: ``profile_flagos`` results (the host time of
each flagos impl per call, before and after a change, against vLLM's own kernel, with where the
flagos time went), ``profile_engine`` and ``e2e --design policy-*`` results (engine steps per
configuration and the policies compared inside one engine), ``bench_align`` results (GPU time by
pair count) and ``tune_moe`` results (the tuned fused-MoE configs)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from benchmarks.cli import read_json
from benchmarks.tables import Column, markdown_table

ROOT = Path(__file__).resolve().parent.parent
DASH = "–"


def _by_op(rows: list[dict], tokens: int) -> dict[str, dict[str, dict]]:
    """op -> impl label -> row, at `tokens` tokens, rows without a time left out."""
    out: dict[str, dict[str, dict]] = {}
    for row in rows:
        if row.get("tokens") == tokens and "host_us" in row:
            out.setdefault(row["op"], {})[row["impl"]] = row
    return out


def _flagos(impls: dict[str, dict]) -> dict | None:
    """The flagos call vLLM makes in eager mode: the in-place variant where the op has one."""
    return impls.get("flagos eager variant") or impls.get("flagos")


def _cuda(impls: dict[str, dict]) -> dict | None:
    return impls.get("cuda eager variant") or impls.get("cuda")


def _where(row: dict | None, top: int = 2) -> str:
    """The origins holding most of the profiled time, e.g. "flag_gems 43%, C: other 19%"."""
    if row is None or not row.get("origin_pct"):
        return DASH
    ranked = sorted(row["origin_pct"].items(), key=lambda item: item[1], reverse=True)
    return ", ".join(f"{name} {share:.0f}%" for name, share in ranked[:top])


def _us(row: dict | None) -> str:
    return DASH if row is None else f"{row['host_us']:.1f}"


def host_launch(after: dict, before: str = "", tokens: str = "1") -> str:
    """One row per op: flagos host µs per call before / after, vLLM's CUDA kernel's, the ratio,
    and the two largest shares of the flagos time before and after."""
    count = int(tokens)
    now = _by_op(after["rows"], count)
    then = _by_op(read_json(ROOT / before)["rows"], count) if before else {}
    columns = [
        Column("op", align="<"),
        Column("flagos before"),
        Column("flagos after"),
        Column("vLLM CUDA"),
        Column("after ÷ CUDA"),
        Column("flagos time before: where", align="<"),
        Column("after: where", align="<"),
    ]
    table = []
    for op in sorted(now):
        fl, cu = _flagos(now[op]), _cuda(now[op])
        old = _flagos(then.get(op, {}))
        ratio = DASH if fl is None or cu is None else f"{fl['host_us'] / cu['host_us']:.2f}×"
        table.append([op, _us(old), _us(fl), _us(cu), ratio, _where(old), _where(fl)])
    head = (
        f"{after.get('device', 'GPU')}: host µs per call at {count} token"
        f"{'s' if count > 1 else ''} (calls queued back to back; median of 5 × 300), the in-place "
        "variant where vLLM runs one in eager mode. Where: shares of the cProfile'd flagos time by "
        "origin (`vllm_fl`: our impl and launch code; `flag_gems`: FlagGems' Python wrappers; "
        "`triton`: Triton's Python launcher; `C:`: C calls, torch ops and Triton's C launcher)."
    )
    return textwrap.fill(head, width=100) + "\n\n" + markdown_table(columns, table)


def profile_e2e(results: list[dict]) -> str:
    """``profile_engine`` results: per configuration, ms per engine step, the GPU's kernel time
    in it and the cProfile'd host time by origin; or, for ``--ab`` results, ms per step of each
    policy inside one engine (:func:`ab_table`)."""
    blocks = []
    for result in results:
        if "error" in result:
            blocks.append(f"{result['config']}: failed ({result['error']})")
        elif result.get("mode") == "steps":
            blocks.append(ab_steps_table(result))
        elif "samples" in result:
            blocks.append(ab_table(result))
    steps = [r for r in results if "gpu_kernel_ms_per_step" in r]
    if steps:
        origins = sorted(
            {o for r in steps for o in r["host_ms_per_step_profiled"]},
            key=lambda o: -max(r["host_ms_per_step_profiled"].get(o, 0.0) for r in steps),
        )
        columns = [
            Column("config", align="<"),
            Column("ms per step"),
            Column("GPU kernels ms"),
            Column("host ms (cProfile)"),
        ]
        columns += [Column(origin) for origin in origins]
        table = []
        for r in steps:
            host = r["host_ms_per_step_profiled"]
            cells = [r["config"], f"{r['step_ms']:.2f}", f"{r['gpu_kernel_ms_per_step']:.2f}"]
            cells.append(f"{sum(host.values()):.2f}")
            cells += [f"{host[o]:.2f}" if o in host else DASH for o in origins]
            table.append(cells)
        blocks.insert(0, markdown_table(columns, table))
    return "\n\n".join(blocks)


def ab_table(result: dict) -> str:
    """One ``--ab`` result: each policy's median ms per step and its ratio to prefer=vendor's,
    the median of the round-by-round ratios (where recorded) and the rounds' samples."""
    base = result["step_ms"]["prefer=vendor"]
    paired = result.get("paired_ratio", {})
    spread = result.get("paired_ratio_range", {})
    columns = [
        Column("policy (one engine)", align="<"),
        Column("ms per step"),
        Column("÷ prefer=vendor"),
        Column("paired ÷ (min-max)"),
        Column("rounds", align="<"),
    ]
    table = [
        [
            name,
            f"{ms:.2f}",
            f"{ms / base:.3f}×",
            (
                f"{paired[name]:.3f}× ({spread[name][0]:.3f}-{spread[name][1]:.3f})"
                if name in paired
                else DASH
            ),
            ", ".join(f"{s:.1f}" for s in result["samples"][name]),
        ]
        for name, ms in result["step_ms"].items()
    ]
    return markdown_table(columns, table)


def ab_steps_table(result: dict) -> str:
    """One ``--ab-steps`` result: each policy's median ms per step, and the median of its steps'
    ratios to their prefer=vendor neighbours with its 95% interval, quartiles, the share of
    steps slower than their neighbours and the number of steps compared."""
    columns = [
        Column("policy (one engine, turns by step)", align="<"),
        Column("ms per step"),
        Column("÷ vendor neighbours"),
        Column("95% interval"),
        Column("quartiles"),
        Column("steps slower"),
        Column("steps"),
    ]
    table = []
    for name, ms in result["step_ms"].items():
        if name not in result["paired_ratio"]:
            table.append([name, f"{ms:.2f}", DASH, DASH, DASH, DASH, DASH])
            continue
        low, high = result["paired_ratio_ci95"][name]
        q1, q3 = result["paired_ratio_quartiles"][name]
        table.append(
            [
                name,
                f"{ms:.2f}",
                f"{result['paired_ratio'][name]:.3f}×",
                f"{low:.3f}-{high:.3f}",
                f"{q1:.3f}-{q3:.3f}",
                f"{result['slower_share'][name]:.0%}",
                str(result["pairs"][name]),
            ]
        )
    return markdown_table(columns, table)


def align_graph(result: dict) -> str:
    """``bench_align.py`` results: GPU µs per alignment in CUDA graphs by pair count, one
    column per implementation (the one-program kernel at each warp count, FlagGems' staged)."""
    impls: list[str] = []
    by_pairs: dict[int, dict[str, float]] = {}
    for row in result["rows"]:
        if row["impl"] not in impls:
            impls.append(row["impl"])
        by_pairs.setdefault(row["pairs"], {})[row["impl"]] = row["graph_us"]
    columns = [Column("pairs")] + [Column(impl) for impl in impls]
    table = [
        [str(pairs)] + [_graph_us(us.get(impl)) for impl in impls]
        for pairs, us in sorted(by_pairs.items())
    ]
    return f"{result['device']}: GPU µs per call in CUDA graphs\n\n" + markdown_table(
        columns, table
    )


def _graph_us(value: float | None) -> str:
    return DASH if value is None else f"{value:.1f}"


def _tile(config: dict) -> str:
    """A fused-MoE config in short: "16×64×128 g1 w4 s3" (block M×N×K, group M, warps,
    stages)."""
    blocks = "×".join(str(config[f"BLOCK_SIZE_{axis}"]) for axis in "MNK")
    return f"{blocks} g{config['GROUP_SIZE_M']} w{config['num_warps']} s{config['num_stages']}"


def moe_tune(result: dict) -> str:
    """``tune_moe.py`` results: per token count, FlagGems' pick and the tuned config with their
    GPU µs per ``fused_experts`` call in CUDA graphs, and the speed-up."""
    columns = [
        Column("tokens"),
        Column("FlagGems' config", align="<"),
        Column("FlagGems' µs"),
        Column("tuned config", align="<"),
        Column("tuned µs"),
        Column("speed-up"),
    ]
    table = [
        [
            str(row["tokens"]),
            _tile(row["flag_gems"]),
            f"{row['flag_gems_us']:.1f}",
            _tile(row["best"]),
            f"{row['best_us']:.1f}",
            f"{row['flag_gems_us'] / row['best_us']:.3f}×",
        ]
        for row in sorted(result["rows"], key=lambda row: row["tokens"])
    ]
    head = (
        f"{result['device']}, {result['shape']} experts ({result['experts']} × "
        f"{result['intermediate']}, hidden {result['hidden']}, top-{result['top_k']}), "
        f"{result['dtype']}; {result['configs']} configs timed, {result['failed']} failed to "
        "compile. µs per `fused_experts` call in CUDA graphs (median of 5 turns of the five "
        "fastest and FlagGems' pick); config: block M×N×K, group M, warps, stages."
    )
    return "\n".join(textwrap.wrap(head, 100)) + "\n\n" + markdown_table(columns, table)

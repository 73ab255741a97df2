"""The docs' benchmark figures, rendered from the result files they describe.

A generated region of README.md or docs/benchmarks.md starts with a marker naming a renderer, a
result file (relative to the repository root) and the renderer's options, and ends with the END
marker:

    <!-- BEGIN GENERATED: bench kernels benchmarks/results/h100_ops.json dtype=bfloat16 -->
    ...
    <!-- END GENERATED: bench -->

    python -m benchmarks.report            # rewrite every region of both files
    python -m benchmarks.report --check    # exit 1 with a diff where a file differs
    python -m benchmarks.report --doc docs/benchmarks.md   # that file only

Renderers (options in brackets):
  kernels       bench_ops results as a table [dtype, tokens, ops, bandwidth]
  eager-launch  a bullet on eager call times of flagos against the vendor [max_tokens, example]
  policy-gap    a bullet counting where the selected backend is slower than the fastest [factor]
  e2e-summary   e2e --design rounds: the --summarize table
  e2e-rounds    e2e --design rounds results round by round, greedy tokens compared to vanilla's
  e2e-engine    e2e --design rounds --watch-engine: the engine process's JIT misses and pauses
  e2e-paired    e2e --design paired: medians and paired ratios of two resident engines
                [merged: more result files whose pairs count too]
  e2e-pairs     e2e --design paired results pair by pair
  dispatch      bench_dispatch results and what the dispatch adds to a call
  host-cpu      bench_host_launch results: the launch code's host time per call on the CPU
  host-launch   profile_flagos results: flagos host time per call before/after [before, tokens]
  profile-e2e   profile_engine and e2e --design policy-* results: an engine step's time
  align-graph   bench_align results: GPU µs of each alignment implementation by pair count
  moe-tune      tune_moe results: FlagGems' and the tuned fused-MoE config per token count
  attention     bench_attention results: paged-attention kernels per shape against FA3
  census        census results: kernels by origin per configuration, tokens against the first
  families      benchmarks.families: per model family, shipped and portable runs, compiled
                kernels left under the portable path, tokens against vanilla's
  families-headline  the same in one row: families run, with vanilla's tokens, with no
                compiled kernel left
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.bench_ops import Report, Row, load_report, policy_token
from benchmarks.cli import DECODE_MAX_TOKENS, int_list, read_json
from benchmarks.e2e_paired import format_table as paired_table
from benchmarks.e2e_paired import merge as merge_pairs
from benchmarks.e2e_rounds import format_table as e2e_table
from benchmarks.e2e_rounds import summarize
from benchmarks.report_flagos import align_graph, host_launch, moe_tune, profile_e2e
from benchmarks.tables import Column, markdown_table
from benchmarks.timing import median

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
#: the files whose generated regions `main` renders, relative to the repository root
DOCS = ("README.md", "docs/benchmarks.md")
BEGIN = re.compile(r"<!-- BEGIN GENERATED: bench (?P<spec>.*?) -->")
END = "<!-- END GENERATED: bench -->"
DASH = "–"


class ReportError(ValueError):
    """A marker of a doc that cannot be rendered (the message names the file and line)."""


# -- bench_ops results ----------------------------------------------------------------------------


def _backend_order(backend: str) -> tuple[int, str]:
    kinds = ("default.", "vendor.", "reference.")
    rank = next((i for i, k in enumerate(kinds) if backend.startswith(k)), len(kinds))
    return rank, backend


def _us(value: float | None) -> str:
    return DASH if value is None else f"{value:.1f}"


def _latency(row: Row) -> str:
    """eager / graph µs, bold for the selected backend."""
    cell = f"{_us(row.eager_us)} / {_us(row.graph_us)}"
    return f"**{cell}**" if row.selected else cell


def _sizes_line(report: Report) -> str:
    if not report.models:
        return ""
    parts = []
    for name, m in report.models.items():
        cases = [case for case, model in report.cases.items() if model == name]
        sizes = f"hidden {m['hidden']}, intermediate {m['intermediate']}, {m['heads']} heads"
        sizes += f" / {m['kv_heads']} KV heads × {m['head_dim']}"
        if m.get("experts"):
            sizes += f", {m['experts']} experts top-{m['top_k']} × {m['moe_intermediate']}"
        parts.append(f"{name} ({sizes}): {', '.join(cases)}")
    own = [case for case, model in report.cases.items() if not model]
    if own:
        parts.append(f"the ops.yaml test case's own sizes: {', '.join(own)}")
    return " Input sizes: " + "; ".join(parts) + "."


def kernels(
    report: Report, dtype: str = "", tokens: str = "", ops: str = "", bandwidth: str = "yes"
) -> str:
    """One line per (op, tokens): each backend's eager / CUDA-graph µs, the selected one bold,
    and (unless `bandwidth` is "no") the best bandwidth a backend of the dispatch reached."""
    if bandwidth not in ("yes", "no"):
        raise ValueError(f"bandwidth={bandwidth!r}; allowed: yes, no")
    dtype = dtype or report.rows[0].dtype
    wanted_tokens = int_list(tokens) if tokens else None
    wanted_ops = ops.split(",") if ops else None
    rows = [
        r
        for r in report.rows
        if r.dtype == dtype
        and (wanted_tokens is None or r.tokens in wanted_tokens)
        and (wanted_ops is None or r.op in wanted_ops)
    ]
    if not rows:
        raise ValueError(f"no rows for dtype {dtype!r}, tokens {tokens!r}, ops {ops!r}")
    backends = sorted({r.backend for r in rows}, key=_backend_order)
    points: dict[tuple[str, int], dict[str, Row]] = {}
    for r in rows:
        points.setdefault((r.op, r.tokens), {})[r.backend] = r
    columns = [Column(f"op ({dtype})", align="<"), Column("tokens")]
    columns += [Column(f"{policy_token(b)} eager / graph") for b in backends]
    if bandwidth == "yes":
        columns.append(Column("best backend, % of copy BW"))
    table = []
    for (op, t), by_backend in points.items():
        cells: list[object] = [op, t]
        for b in backends:
            r = by_backend.get(b)
            cells.append(DASH if r is None else "error" if r.error else _latency(r))
        if bandwidth == "yes":
            rates = [
                r.gbps
                for b, r in by_backend.items()
                if r.gbps is not None and not b.startswith("compile(")
            ]
            cells.append(f"{100 * max(rates) / report.copy_gbps:.0f}%" if rates else DASH)
        table.append(cells)
    head = _paragraph(
        f"{report.device}, {report.date}, torch {report.torch}, triton {report.triton}, copy "
        f"bandwidth {report.copy_gbps} GB/s. Latency in µs, eager (one call, launch included) / "
        "CUDA graph (replay, launch excluded); bold: the backend the run's policy selected."
        + (
            " Bandwidth counts every input read and every output written once."
            if bandwidth == "yes"
            else ""
        )
        + _sizes_line(report)
        + (f" Note of the run: {report.note}" if report.note else "")
    )
    return head + "\n\n" + markdown_table(columns, table)


def eager_launch(report: Report, max_tokens: str = "", example: str = "") -> str:
    """Eager call times of the flagos impls against the vendor's at decode token counts."""
    limit = int(max_tokens) if max_tokens else DECODE_MAX_TOKENS
    decode = [r for r in report.rows if r.tokens <= limit and r.eager_us is not None]
    flagos = [r for r in decode if r.backend.startswith("default.")]
    vendor = [r for r in decode if r.backend.startswith("vendor.")]
    if not flagos or not vendor:
        raise ValueError(f"no flagos and vendor rows at <= {limit} tokens")
    vendor_name = policy_token(vendor[0].backend)

    def spread(rows: list[Row]) -> str:
        times = [r.eager_us for r in rows]
        return f"{min(times):.1f}–{max(times):.1f} µs (median {median(times):.1f})"

    slow = sum(r.eager_us >= 30 for r in flagos)
    graphed = [r.graph_us for r in flagos if r.graph_us is not None]
    text = (
        f"- In eager mode, what vLLM pays with `enforce_eager`, `flagos` calls at up to {limit} "
        f"tokens ({len(flagos)} points: ops × dtypes × token counts) took {spread(flagos)}, "
        f"30 µs or more at {slow} of them; `{vendor_name}` calls took {spread(vendor)}."
    )
    if graphed:
        text += (
            f" Inside a CUDA graph the same `flagos` calls took a median of "
            f"{median(graphed):.1f} µs: the rest is their launch, through FlagGems' Python "
            "launcher."
        )
    if example:
        op, _, t = example.partition(":")
        picked = {r.backend: r for r in decode if r.op == op and r.tokens == int(t or 1)}
        fl = next((r for b, r in picked.items() if b.startswith("default.")), None)
        ve = next((r for b, r in picked.items() if b.startswith("vendor.")), None)
        if fl is None or ve is None:
            raise ValueError(f"example {example!r}: no flagos and vendor rows")
        text += (
            f" E.g. `{op}` at {fl.tokens} token{'s' if fl.tokens > 1 else ''} ({fl.dtype}): "
            f"{fl.eager_us:.1f} µs against {ve.eager_us:.1f} µs."
        )
    return _paragraph(text)


def _paragraph(text: str) -> str:
    """`text` wrapped at the README's line length, a bullet's continuation lines indented."""
    indent = "  " if text.startswith("- ") else ""
    return textwrap.fill(text, width=100, subsequent_indent=indent, break_on_hyphens=False)


def policy_gap(report: Report, factor: str = "1.1") -> str:
    """How often the selected backend is over `factor` times slower than the fastest one that
    the dispatch could have selected, in CUDA-graph timings."""
    limit = float(factor)
    points: dict[tuple[str, str, int], list[Row]] = {}
    for r in report.rows:
        if r.graph_us is not None and not r.backend.startswith("compile("):
            points.setdefault((r.op, r.dtype, r.tokens), []).append(r)
    judged = slower = 0
    for rows in points.values():
        selected = [r for r in rows if r.selected]
        if selected:
            judged += 1
            slower += selected[0].graph_us > limit * min(r.graph_us for r in rows)
    return _paragraph(
        f"- In CUDA-graph timings the selected backend is more than {limit:g}× slower than the "
        f"fastest one at {slower} of {judged} points (op × dtype × tokens; the JSON has them all)."
    )


# -- end-to-end results -------------------------------------------------------------------------


def e2e_summary(runs: list[dict]) -> str:
    return "```\n" + e2e_table(summarize(runs)) + "\n```"


def e2e_rounds(runs: list[dict]) -> str:
    """Output tok/s (decode tok/s) of every round per configuration and mode, and whether its
    greedy tokens are vanilla vLLM's in the same mode."""
    rounds = sorted({r["round"] for r in runs})
    groups: dict[tuple[str, str], dict[int, dict]] = {}
    for r in runs:
        groups.setdefault((r["config"], r["mode"]), {})[r["round"]] = r
    vanilla = {r["mode"]: r["tokens"] for r in runs if r["config"] == "vanilla" and "tokens" in r}
    columns = [Column("config", align="<"), Column("mode", align="<")]
    columns += [Column(f"round {n}: output (decode) tok/s") for n in rounds]
    columns.append(Column("greedy tokens", align="<"))
    table = []
    for (config, mode), by_round in groups.items():
        cells: list[object] = [config, mode]
        for r in map(by_round.get, rounds):
            if r is None or "error" in r:
                cells.append(DASH if r is None else "failed")
                continue
            cells.append(f"{r['output_tok_s']:.1f} ({r['decode_tok_s']:.1f})")
        same = [
            r["tokens"] == vanilla[mode]
            for r in by_round.values()
            if "tokens" in r and mode in vanilla
        ]
        if config == "vanilla" or not same:
            cells.append(DASH)
        else:
            cells.append("identical" if all(same) else f"different in {same.count(False)} runs")
        table.append(cells)
    return markdown_table(columns, table)


def e2e_paired(result: dict, merged: str = "") -> str:
    """The paired design's table; ``merged``: more result files (comma-separated) whose pairs
    count with this one's."""
    more = [read_json(ROOT / path) for path in merged.split(",") if path]
    return "```\n" + paired_table(merge_pairs([result, *more])) + "\n```"


def e2e_pairs(result: dict) -> str:
    """Per pair of batches: which engine went first, both engines' output (decode) tok/s and
    the second configuration's ratios to the first."""
    base, other = result["configs"]
    columns = [
        Column("pair"),
        Column("first", align="<"),
        Column(f"{base}: output (decode) tok/s"),
        Column(f"{other}: output (decode) tok/s"),
        Column("ratio output (decode)"),
    ]
    table = []
    for number, pair in enumerate(result["pairs"], 1):
        a, b = pair[base], pair[other]
        ratios = f"{b['output_tok_s'] / a['output_tok_s']:.3f}"
        if "decode_tok_s" in a and "decode_tok_s" in b:
            ratios += f" ({b['decode_tok_s'] / a['decode_tok_s']:.3f})"
        table.append([number, pair["first"], _tok_s(a), _tok_s(b), ratios])
    return markdown_table(columns, table)


def _tok_s(figures: dict) -> str:
    decode = figures.get("decode_tok_s")
    return f"{figures['output_tok_s']:.1f}" + ("" if decode is None else f" ({decode:.1f})")


def _seconds(values: list[float]) -> str:
    return " / ".join(f"{v:.2f}" for v in values)


def e2e_engine(runs: list[dict]) -> str:
    """Per run with an engine report (``e2e --design rounds --watch-engine``): the timed batches'
    seconds, Triton's JIT misses in the engine process while they ran (count, total ms, by
    kernel), its longest garbage-collector pause and the caching allocator's retries."""
    columns = [
        Column("config", align="<"),
        Column("round"),
        Column("batches s"),
        Column("decode batches s"),
        Column("JIT misses"),
        Column("JIT ms"),
        Column("JIT by kernel (misses, ms)", align="<"),
        Column("longest GC ms"),
        Column("alloc retries"),
    ]
    table = []
    for r in runs:
        engine = r.get("engine")
        if engine is None:
            continue
        kernels = ", ".join(
            f"{name} ({n}, {ms:.0f})" for name, (n, ms) in engine["jit_by_kernel"].items()
        )
        allocator = engine.get("allocator")
        table.append(
            [
                f"{r['config']} ({r['mode']})",
                r["round"],
                _seconds(r.get("generate_s_all", [])),
                _seconds(r.get("decode_s_all", [])),
                engine["jit_misses"],
                f"{engine['jit_ms']:.1f}",
                kernels or DASH,
                f"{engine['gc_max_ms']:.1f}",
                DASH if allocator is None else allocator["num_alloc_retries"],
            ]
        )
    return markdown_table(columns, table)


# -- bench_dispatch results -----------------------------------------------------------------------


def dispatch(result: dict) -> str:
    from benchmarks.bench_dispatch import format_table

    ns = {row["path"]: row["ns"] for row in result["rows"]}
    lines = [
        f"`--repeat {result['repeat']} --number {result['number']}`, {result['machine']}, "
        f"{result['date']}:",
        "",
        "```",
        f"Python {result['python']}, median of {result['repeat']} runs",
        format_table(result["rows"]),
        "```",
    ]
    compared = {"direct impl call", "layer.forward_oot(x)", "direct function impl"}
    if compared | {"replaced function mod.fn(x)"} <= ns.keys():
        layer = ns["layer.forward_oot(x)"] - ns["direct impl call"]
        function = ns["replaced function mod.fn(x)"] - ns["direct function impl"]
        trampoline = ns.get("trampoline (2 candidates)")
        if trampoline is None:  # results from before direct binding: every layer had a trampoline
            sentence = (
                'A function op as vLLM calls it ("replaced function": the module attribute holding '
                f"the op's trampoline) adds {function:.0f} ns to calling its impl directly, a "
                f"layer's `forward_oot` {layer:.0f} ns."
            )
            base, check = ns["layer.forward_oot(x)"], "check per eager call"
        else:
            sentence = (
                f"A layer's `forward_oot` differs from calling its impl directly by {layer:+.0f} ns "
                "where nothing can fall back from the impl (one candidate, or strict mode: the "
                f"class holds the impl itself), and adds {trampoline - ns['direct impl call']:.0f} "
                "ns where a fallback is possible (the class holds the op's trampoline); a function "
                'op as vLLM calls it ("replaced function": the module attribute holding the op\'s '
                f"trampoline) adds {function:.0f} ns."
            )
            base, check = trampoline, "check per eager call in its trampoline"
        if "forward_oot, compile_prefer" in ns:
            extra = ns["forward_oot, compile_prefer"] - base
            sentence += (
                " An op that selects another impl under `torch.compile` (`compile_prefer`) pays "
                f"one `torch.compiler.is_compiling()` {check}: {extra:.0f} ns more."
            )
        lines += ["", _paragraph(sentence)]
    return "\n".join(lines)


# -- the docs -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Renderer:
    render: Callable[..., str]
    options: tuple[str, ...]
    load: Callable[[Path], object] = read_json


def host_cpu(result: dict) -> str:
    from benchmarks.bench_host_launch import format_table

    return "\n".join(
        [
            f"`--repeat {result['repeat']} --number {result['number']}`, {result['machine']}, "
            f"Python {result['python']}, torch {result['torch']}, {result['date']}:",
            "",
            "```",
            format_table(result["rows"]),
            "```",
        ]
    )


def quant_gemm(result: dict) -> str:
    from benchmarks.bench_quant_gemm import Row, table

    rows = [Row(**row) for row in result["rows"]]
    return "\n".join(
        [f"{result['device']}, µs per GEMM in a CUDA graph:", "", "```", table(rows), "```"]
    )


def attention_kernels(result: dict) -> str:
    """bench_attention's tables: per model and phase, µs per call of each candidate and its
    ratio to FlashAttention-3."""
    from benchmarks.bench_attention import BASELINE, Row, table

    rows = [Row(**row) for row in result["rows"]]
    versions = ", ".join(
        f"{name} {result[name]}"
        for name in ("torch", "triton", "vllm", "flag_gems")
        if result.get(name)
    )
    head = f"{result['device']}" + (f" ({versions})" if versions else "")
    settings = result.get("flagos_settings")
    if settings:
        head += ", `flagos` with " + ", ".join(f"{k}={v}" for k, v in settings.items())
    head += f"; µs per call in a CUDA graph, ratio to `{BASELINE}`:"
    return "\n".join([head, "", "```", table(rows), "```"])


def block_fp8_tune(result: dict) -> str:
    """Per weight shape and token count: the tuned config's µs against FlagGems' own choice."""
    from benchmarks.tables import Column, text_table

    columns = [Column("N x K", align="<"), Column("tokens"), Column("tuned us", ".2f")]
    columns += [Column("FlagGems' us", ".2f"), Column("speed-up", ".2f")]
    body = [
        [
            f"{r['n']}x{r['k']}",
            r["tokens"],
            r["best_us"],
            r["flag_gems_us"],
            r["flag_gems_us"] / r["best_us"],
        ]
        for r in result["rows"]
    ]
    return "\n".join(
        [f"{result['device']}, in a CUDA graph:", "", "```", text_table(columns, body), "```"]
    )


def attention_tune(result: dict) -> str:
    """Per model and decode batch size: the launch the tuner chose against vLLM's rule."""
    from benchmarks.tune_attention import report

    contexts = ", ".join(str(c) for c in result["contexts"])
    head = (
        f"{result['device']}; µs per call in a CUDA graph, geometric mean over contexts "
        f"{contexts}:"
    )
    return "\n".join([head, "", "```", report(result["models"]), "```"])


def census(results: list[dict]) -> str:
    """Per configuration: the CUDA kernels by origin, the compiled ones by name, and its tokens
    against the first configuration's."""
    from vllm_fl.testing.census import ORIGINS, kernel_origin

    lines = ["```"]
    for result in results:
        # sorted again by today's rules: a file keeps the origins of the run's day
        kernels: dict[str, dict[str, int]] = {o: {} for o in ORIGINS}
        for names in result.get("kernels", {}).values():
            for name, count in names.items():
                kernels[kernel_origin(name)][name] = count
        counts = ", ".join(f"{o} {sum(kernels.get(o, {}).values())}" for o in ORIGINS)
        lines.append(f"{result['config']}: kernel calls by origin: {counts}")
        top = sorted(kernels.get("compiled", {}).items(), key=lambda item: -item[1])[:6]
        lines += [f"    compiled {count:>5}  {name[:90]}" for name, count in top]
        if "against" in result:
            c = result["against"]
            lines.append(
                f"    against {c['config']}: {c['identical']}/{c['sequences']} sequences identical, "
                f"{c['tokens_agreeing']}/{c['tokens']} tokens before the first difference, "
                f"largest logprob difference over the first tokens {c['max_logprob_diff']:.2g}"
            )
    return "\n".join([*lines, "```"])


def families(result: dict) -> str:
    """benchmarks.families: per family whether the shipped policy and the portable path run,
    the compiled kernels left under the portable path, and both one's tokens against vanilla's;
    then the families vanilla vLLM does not run."""
    from benchmarks.families import TABLE_COLUMNS, describe_runs, table_rows, vanilla_failures

    lines = [
        _paragraph(describe_runs(result)),
        "",
        markdown_table(TABLE_COLUMNS, table_rows(result)),
    ]
    failed = vanilla_failures(result)
    if failed:
        lines += ["", _paragraph("Vanilla vLLM does not run " + "; ".join(failed) + ".")]
    return "\n".join(lines)


def families_headline(result: dict) -> str:
    """benchmarks.families in one table row: how many families each configuration runs, how
    many give vanilla's tokens, how many run the portable path with no compiled kernel left."""
    from benchmarks.families import HEADLINE_COLUMNS, headline_row

    return markdown_table(HEADLINE_COLUMNS, [headline_row(result)])


RENDERERS = {
    "kernels": Renderer(kernels, ("dtype", "tokens", "ops", "bandwidth"), load_report),
    "eager-launch": Renderer(eager_launch, ("max_tokens", "example"), load_report),
    "policy-gap": Renderer(policy_gap, ("factor",), load_report),
    "e2e-summary": Renderer(e2e_summary, ()),
    "e2e-rounds": Renderer(e2e_rounds, ()),
    "e2e-engine": Renderer(e2e_engine, ()),
    "e2e-paired": Renderer(e2e_paired, ("merged",)),
    "e2e-pairs": Renderer(e2e_pairs, ()),
    "dispatch": Renderer(dispatch, ()),
    "host-cpu": Renderer(host_cpu, ()),
    "host-launch": Renderer(host_launch, ("before", "tokens")),
    "profile-e2e": Renderer(profile_e2e, ()),
    "align-graph": Renderer(align_graph, ()),
    "moe-tune": Renderer(moe_tune, ()),
    "quant-gemm": Renderer(quant_gemm, ()),
    "attention": Renderer(attention_kernels, ()),
    "block-fp8-tune": Renderer(block_fp8_tune, ()),
    "attention-tune": Renderer(attention_tune, ()),
    "census": Renderer(census, ()),
    "families": Renderer(families, ()),
    "families-headline": Renderer(families_headline, ()),
}


def render_region(spec: str, root: Path = ROOT, where: str = "README.md") -> str:
    """The body of the region whose BEGIN marker says `spec` (renderer, file, options)."""
    words = spec.split()
    if len(words) < 2:
        raise ReportError(f"{where}: marker {spec!r} lacks a renderer and a result file")
    name, file, *pairs = words
    renderer = RENDERERS.get(name)
    if renderer is None:
        raise ReportError(f"{where}: renderer {name!r} unknown; allowed: {', '.join(RENDERERS)}")
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in renderer.options:
            allowed = ", ".join(renderer.options) or "none"
            raise ReportError(f"{where}: option {pair!r} of {name} unknown; allowed: {allowed}")
        options[key] = value
    path = root / file
    if not path.is_file():
        raise ReportError(f"{where}: result file {file} not found")
    try:
        body = renderer.render(renderer.load(path), **options)
    except (KeyError, TypeError, ValueError) as exc:
        raise ReportError(f"{where}: {name} of {file}: {type(exc).__name__}: {exc}") from exc
    note = f"<!-- generated from {file} by `python -m benchmarks.report`; do not edit -->"
    return f"{note}\n{body}\n"


def render(text: str, root: Path = ROOT, name: str = "README.md") -> str:
    """`text` with every generated region rendered again."""
    out, pos = [], 0
    for match in BEGIN.finditer(text):
        if match.start() < pos:
            continue
        line = text.count("\n", 0, match.start()) + 1
        end = text.find(END, match.end())
        if end < 0:
            raise ReportError(f"{name}:{line}: {match.group(0)} has no {END}")
        # a region closes before the next one opens: a misspelt END must not swallow the text
        # (and the regions) up to the next region's END
        following = BEGIN.search(text, match.end(), end)
        if following is not None:
            at = text.count("\n", 0, following.start()) + 1
            raise ReportError(
                f"{name}:{line}: {match.group(0)} has no {END} before the next region (line {at})"
            )
        body = render_region(match.group("spec"), root, f"{name}:{line}")
        out += [text[pos : match.end()], "\n", body]
        pos = end
    out.append(text[pos:])
    return "".join(out)


def rerender(path: Path, root: Path, check: bool) -> int:
    """Render `path`'s regions (result files relative to `root`): 0 when it was current, 1 when
    it was stale (rewritten, or with `check` only shown as a diff), 2 for a bad marker."""
    name = path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name
    text = path.read_text()
    try:
        new = render(text, root, name)
    except ReportError as exc:
        print(f"report: {exc}", file=sys.stderr)
        return 2
    if new == text:
        print(f"report: {name} is up to date")
        return 0
    if check:
        diff = difflib.unified_diff(
            text.splitlines(True), new.splitlines(True), f"a/{name}", f"b/{name}"
        )
        sys.stdout.writelines(diff)
        print(f"report: {name} is stale; run `python -m benchmarks.report`")
        return 1
    path.write_text(new)
    print(f"report: rewrote the generated regions of {name}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report a stale file")
    parser.add_argument(
        "--doc",
        "--readme",
        dest="docs",
        type=Path,
        action="append",
        help=f"a file to render (default: those of {', '.join(DOCS)} that exist)",
    )
    parser.add_argument(
        "--root",
        type=Path,
        help="where the markers' result files are (default: the repository, or the folder of a "
        "file outside it)",
    )
    args = parser.parse_args(argv)
    docs = args.docs or [ROOT / doc for doc in DOCS if (ROOT / doc).is_file()]
    status = 0
    for doc in docs:
        doc = doc.resolve()
        root = args.root or (ROOT if doc.is_relative_to(ROOT) else doc.parent)
        status = max(status, rerender(doc, root.resolve(), args.check))
    return 0 if status == 1 and not args.check else status


if __name__ == "__main__":
    sys.exit(main())

"""Kernel benchmark: every registered op x every available backend x dtype x token count.

For each combination it measures the latency of the op as dispatched (eager, launch overhead
included) and inside a CUDA graph replay (launch overhead excluded), plus `torch.compile` of the
reference implementation, which is what vLLM runs when its custom ops are off. It reports achieved
bandwidth against the device's measured copy bandwidth, the backend the current policy selects,
and proposes per-op `op_backends` orders for the decode and prefill regimes.

The inputs come from ops.yaml: each op's test cases at model size (`benchmarks.cases`,
`benchmarks.shapes`), so an op added to the manifest is benchmarked too.

    python -m benchmarks.bench_ops                    # full sweep (needs a CUDA device)
    python -m benchmarks.bench_ops --ops rms_norm --tokens 1,32768 --dtypes bfloat16

Writes JSON (--json, or --out) and, when matplotlib is installed (`pip install .[bench]`), a PNG
plot (--plot); a JSON file from an earlier run can be plotted again with --plot-only.
`python -m benchmarks.report` renders the docs' tables from the JSON files in
benchmarks/results.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch

from benchmarks.cases import BenchCase, Call, bench_cases
from benchmarks.cli import DECODE_MAX_TOKENS, DTYPES, TOKENS, int_list, name_list, read_json
from benchmarks.cli import write_json
from benchmarks.tables import Column, text_table
from benchmarks.timing import gpu_us

FLOAT_DTYPES = ("bfloat16", "float16", "float32")


@dataclass
class Row:
    """One measured (op, backend, dtype, tokens) point; latencies in microseconds."""

    op: str
    backend: str
    dtype: str
    tokens: int
    eager_us: float | None
    graph_us: float | None
    bytes_moved: int
    gbps: float | None
    selected: bool
    error: str | None = None


@dataclass
class Report:
    device: str
    torch: str
    triton: str
    copy_gbps: float
    date: str
    rows: list[Row] = field(default_factory=list)
    note: str = ""
    #: model name -> its sizes (shapes.ModelShape); absent from files written before
    models: dict[str, dict] = field(default_factory=dict)
    #: benchmark case (Row.op) -> the model whose sizes it ran at ("" for the ops.yaml case's)
    cases: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict) -> Report:
        return cls(**{**data, "rows": [Row(**r) for r in data["rows"]]})


def load_report(path: Path) -> Report:
    return Report.from_json(read_json(path))


def _nbytes(obj) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (tuple, list)):
        return sum(_nbytes(o) for o in obj)
    return 0


def _bytes_moved(call: Call, out) -> int:
    """Compulsory traffic: every input read once, every output written once."""
    inputs = call.values()
    read = _nbytes(inputs)
    layer = call.layer
    if isinstance(getattr(layer, "weight", None), torch.Tensor):
        read += _nbytes(layer.weight)
    if isinstance(getattr(layer, "cos_sin_cache", None), torch.Tensor):
        # one cache row per position (the first argument)
        cache = layer.cos_sin_cache
        read += inputs[0].numel() * cache.shape[-1] * cache.element_size()
    return read + _nbytes(out)


# --- timing -------------------------------------------------------------------------------------


def copy_bandwidth_gbps(device: str) -> float:
    """Device-to-device copy bandwidth, bytes read plus bytes written."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    us = gpu_us(lambda: dst.copy_(src), graph=False)
    return 2 * src.numel() / (us * 1e-6) / 1e9


def _measure(call: Callable[[], object], graph: bool = True) -> tuple[float, float | None, object]:
    out = call()
    torch.cuda.synchronize()
    eager = gpu_us(call, graph=False)
    return eager, (gpu_us(call, graph=True) if graph else None), out


def _compiled_reference(ref_fn):
    # One compiled callable per (case, dtype): Dynamo marks the token dimension dynamic after the
    # second shape, so the sweep compiles twice per case and dtype instead of once per shape.
    return torch.compile(ref_fn, fullgraph=True)


def _row(case: BenchCase, impl_id: str, dtype: str, tokens: int, selected: str | None, **kw) -> Row:
    values = dict(eager_us=None, graph_us=None, bytes_moved=0, gbps=None, error=None) | kw
    return Row(case.name, impl_id, dtype, tokens, selected=impl_id == selected, **values)


def run(ops: list[str], tokens: list[int], dtypes: list[str], device: str) -> Report:
    import triton

    from vllm_fl.dispatch import get_default_manager

    manager = get_default_manager()
    copy_gbps = copy_bandwidth_gbps(device)
    report = Report(
        device=torch.cuda.get_device_name(),
        torch=torch.__version__,
        triton=triton.__version__,
        copy_gbps=round(copy_gbps, 1),
        date=time.strftime("%Y-%m-%d"),
    )
    plan = []
    for op in ops:
        impls = [i for i in manager.registry.get_implementations(op) if i.is_available()]
        op_cases = bench_cases(op)
        if not op_cases or not impls:
            print(
                f"skip {op}: no test case in ops.yaml or no available implementation",
                file=sys.stderr,
            )
            continue
        selected = manager.get_selected_impl_id(op)
        for case in op_cases:
            if case.model is not None:
                report.models[case.model.name] = asdict(case.model)
            report.cases[case.name] = "" if case.model is None else case.model.name
            for dtype in dtypes:
                for t in [case.fixed_tokens] if case.fixed_tokens else tokens:
                    plan.append((case, impls, selected, dtype, t))
    started = time.monotonic()
    compiled: dict[tuple[str, str], Callable] = {}
    for n, (case, impls, selected, dtype_name, t) in enumerate(plan, 1):
        dtype = getattr(torch, dtype_name)
        try:
            call = case.build(t, dtype, device)
        except Exception as exc:  # e.g. vLLM missing: its layer cannot be built
            error = f"inputs: {type(exc).__name__}: {exc}"[:200]
            report.rows += [
                _row(case, i.impl_id, dtype_name, t, selected, error=error) for i in impls
            ]
            continue
        reference = next((i for i in impls if i.impl_id.startswith("reference")), None)
        candidates = [(i.impl_id, i.fn) for i in impls]
        # the MoE references have data-dependent shapes: nothing to compile
        if call.layer is not None and reference is not None:
            if (case.name, dtype_name) not in compiled:
                compiled[case.name, dtype_name] = _compiled_reference(reference.fn)
            candidates.append(("compile(reference)", compiled[case.name, dtype_name]))
        for impl_id, fn in candidates:
            try:
                # The MoE references read sizes back to the host: they cannot be captured.
                capturable = call.layer is not None or not impl_id.startswith("reference")
                eager, graph, out = _measure(call.bind(fn), graph=capturable)
                moved = _bytes_moved(call, out)
                row = _row(
                    case,
                    impl_id,
                    dtype_name,
                    t,
                    selected,
                    eager_us=round(eager, 2),
                    graph_us=None if graph is None else round(graph, 2),
                    bytes_moved=moved,
                    gbps=round(moved / ((graph or eager) * 1e-6) / 1e9, 1),
                )
            except Exception as exc:  # a backend failing on one shape is a result, not a crash
                row = _row(
                    case,
                    impl_id,
                    dtype_name,
                    t,
                    selected,
                    error=f"{type(exc).__name__}: {exc}"[:200],
                )
            report.rows.append(row)
        elapsed = time.monotonic() - started
        print(
            f"\r[{n}/{len(plan)}] {case.name} {dtype_name} T={t}  {elapsed:.0f}s elapsed",
            end="",
            file=sys.stderr,
            flush=True,
        )
    print(file=sys.stderr)
    return report


# --- reporting ----------------------------------------------------------------------------------


def format_table(report: Report) -> str:
    """The report as a terminal table: one line per measured point, failures listed after it."""
    columns = [
        Column("op", align="<"),
        Column("dtype", align="<"),
        Column("tokens"),
        Column(" ", align="<"),
        Column("backend", align="<"),
        Column("eager", ".1f"),
        Column("graph", ".1f"),
        Column("GB/s", ".0f"),
        Column("%copy", ".0f"),
    ]
    ok = [r for r in report.rows if not r.error]
    table = text_table(
        columns,
        [
            (
                r.op,
                r.dtype,
                r.tokens,
                "*" if r.selected else "",
                r.backend,
                r.eager_us,
                r.graph_us,
                r.gbps,
                None if r.gbps is None else 100.0 * r.gbps / report.copy_gbps,
            )
            for r in ok
        ],
    )
    lines = [
        f"device: {report.device}, torch {report.torch}, triton {report.triton}, "
        f"copy bandwidth {report.copy_gbps} GB/s, {report.date}",
        "latency in us: eager (launch included) / CUDA graph; GB/s and % of copy bandwidth from "
        "the graph time; * = selected by the current policy",
        table,
    ]
    lines += [
        f"error: {r.op} {r.dtype} T={r.tokens} {r.backend}: {r.error}"
        for r in report.rows
        if r.error
    ]
    return "\n".join(lines)


def _fastest(rows: list[Row], key: str) -> str | None:
    """The backend with the lowest geometric-mean latency over `rows` (dispatchable ones only)."""
    by_backend: dict[str, list[float]] = {}
    for r in rows:
        value = getattr(r, key)
        if value is not None and not r.backend.startswith("compile("):
            by_backend.setdefault(r.backend, []).append(math.log(value))
    complete = {b: v for b, v in by_backend.items() if len(v) == max(map(len, by_backend.values()))}
    if not complete:
        return None
    return min(complete, key=lambda b: sum(complete[b]) / len(complete[b]))


def policy_token(impl_id: str) -> str:
    """impl id -> the policy token that selects it (`default.flagos` -> `flagos`); other
    backends of the table (`compile(reference)`) as they are."""
    if impl_id.startswith("default."):
        return "flagos"
    if impl_id.startswith("reference."):
        return "reference"
    if impl_id.startswith("vendor."):
        return "vendor:" + impl_id.split(".", 1)[1]
    return impl_id


def propose_policy(report: Report, key: str = "graph_us") -> tuple[str, list[str]]:
    """Per-op `op_backends` orders (fastest first) and notes where decode and prefill differ."""
    lines, notes = ["op_backends:"], []
    for op in dict.fromkeys(r.op for r in report.rows):
        rows = [r for r in report.rows if r.op == op]
        decode = _fastest([r for r in rows if r.tokens <= DECODE_MAX_TOKENS], key)
        prefill = _fastest([r for r in rows if r.tokens > DECODE_MAX_TOKENS], key)
        overall = _fastest(rows, key)
        if overall is None:
            continue
        if decode != prefill:
            notes.append(
                f"{op}: decode fastest {decode}, prefill fastest {prefill}; "
                f"proposing {overall} (lowest geometric mean over all token counts)"
            )
        backends = [overall] + sorted(
            {
                r.backend
                for r in rows
                if r.backend != overall and not r.backend.startswith("compile(")
            },
            key=lambda b: b.startswith("reference"),
        )
        lines.append(f"  {op}: [{', '.join(policy_token(b) for b in backends)}]")
    return "\n".join(lines), notes


def plot(report: Report, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(
            "bench_ops: matplotlib is not installed, so no plot was written; install the "
            "benchmark extra (`pip install .[bench]`, or `pip install matplotlib`) and redraw "
            f"from the JSON with --plot-only",
            file=sys.stderr,
        )
        return False
    ops = list(dict.fromkeys(r.op for r in report.rows))
    dtype = report.rows[0].dtype
    cols = 3
    fig, axes = plt.subplots(
        math.ceil(len(ops) / cols),
        cols,
        figsize=(5 * cols, 3.6 * math.ceil(len(ops) / cols)),
        squeeze=False,
    )
    for ax, op in zip(axes.flat, ops):
        rows = [r for r in report.rows if r.op == op and r.dtype == dtype and r.graph_us]
        for backend in dict.fromkeys(r.backend for r in rows):
            pts = sorted((r.tokens, r.graph_us) for r in rows if r.backend == backend)
            ax.plot(*zip(*pts), marker="o", label=backend)
        ax.set(
            title=f"{op} ({dtype})",
            xscale="log",
            yscale="log",
            xlabel="tokens",
            ylabel="us (CUDA graph)",
        )
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(ops) :]:
        ax.axis("off")
    fig.suptitle(f"{report.device}, {report.date}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return True


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--ops", type=name_list, help="comma-separated ops (default: every registered op)"
    )
    parser.add_argument("--tokens", type=int_list, default=",".join(map(str, TOKENS)))
    parser.add_argument("--dtypes", type=name_list, default=",".join(DTYPES))
    parser.add_argument(
        "--json",
        "--out",
        dest="json",
        type=Path,
        default=Path("benchmarks/results/bench_ops.json"),
        help="where the results go (JSON)",
    )
    parser.add_argument("--plot", type=Path, default=Path("docs/bench_ops.png"))
    parser.add_argument("--plot-only", type=Path, help="plot an earlier JSON result and exit")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    unknown = [d for d in args.dtypes if d not in FLOAT_DTYPES]
    if unknown:
        parser.error(f"--dtypes: {', '.join(unknown)} unknown; allowed: {', '.join(FLOAT_DTYPES)}")

    if args.plot_only:
        report = load_report(args.plot_only)
        print(format_table(report))
        text, notes = propose_policy(report)
        print(text, *notes, sep="\n")
        return 0 if plot(report, args.plot) else 1

    if not torch.cuda.is_available():
        print(
            "bench_ops: no CUDA device; kernel timings need one (run it on a GPU machine)",
            file=sys.stderr,
        )
        return 0
    from vllm_fl.dispatch import get_default_manager

    ops = args.ops or get_default_manager().registry.list_operators()
    report = run(ops, args.tokens, args.dtypes, "cuda")
    print(format_table(report))
    text, notes = propose_policy(report)
    print("\nproposed platform policy (CUDA-graph timings):\n" + text, *notes, sep="\n")
    write_json(args.json, asdict(report))
    plot(report, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())

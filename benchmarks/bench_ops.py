"""Kernel benchmark: every registered op x every available backend x dtype x token count.

For each combination it measures the latency of the op as dispatched (eager, launch overhead
included) and inside a CUDA graph replay (launch overhead excluded), plus `torch.compile` of the
reference implementation, which is what vLLM runs when its custom ops are off. It reports achieved
bandwidth against the device's measured copy bandwidth, the backend the current policy selects,
and proposes per-op `op_backends` orders for the decode and prefill regimes.

    python benchmarks/bench_ops.py                    # full sweep (needs a CUDA device)
    python benchmarks/bench_ops.py --ops rms_norm --tokens 1,32768 --dtypes bfloat16

Writes JSON (--json) and, when matplotlib is installed, a PNG plot (--plot); a JSON file from an
earlier run can be plotted again with --plot-only.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import torch

TOKENS = (1, 8, 64, 256, 2048, 8192, 32768)
DECODE_MAX_TOKENS = 256
DTYPES = ("bfloat16", "float16")
HIDDEN = 4096
INTERMEDIATE = 11008
NUM_HEADS, NUM_KV_HEADS, HEAD_DIM = 32, 8, 128
MAX_POSITIONS = 32768
# Qwen3-30B-A3B's MoE layer
MOE_HIDDEN, MOE_INTERMEDIATE, MOE_EXPERTS, MOE_TOP_K, MOE_BLOCK = 2048, 768, 128, 8, 64


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


# --- inputs: one builder per op, at the sizes a Llama-class model runs ---------------------------


def _rotary_cache(dtype: torch.dtype, device: str) -> torch.Tensor:
    inv_freq = 1.0 / (
        500000.0 ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float32, device=device) / HEAD_DIM)
    )
    t = torch.arange(MAX_POSITIONS, dtype=torch.float32, device=device)
    freqs = torch.outer(t, inv_freq)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(dtype)


def variants(op: str) -> list[str]:
    """The benchmark cases of `op`: norms run with and without a residual ("<op>+residual")."""
    return [op, f"{op}+residual"] if op.endswith("rms_norm") else [op]


def _inputs(op: str, tokens: int, dtype: torch.dtype, device: str):
    """Returns (layer, args) for `op` (or one of its variants), or None when the benchmark has no
    shape for it."""

    def randn(*shape):
        return torch.randn(*shape, dtype=dtype, device=device)

    if op in ("silu_and_mul", "mul_and_silu"):
        return SimpleNamespace(), (randn(tokens, 2 * INTERMEDIATE),)
    if op == "gelu_and_mul":
        return SimpleNamespace(approximate="tanh"), (randn(tokens, 2 * INTERMEDIATE),)
    if op in ("gelu_new", "gelu_fast", "quick_gelu"):
        return SimpleNamespace(), (randn(tokens, INTERMEDIATE),)
    if op in ("rms_norm", "gemma_rms_norm"):
        layer = SimpleNamespace(weight=randn(HIDDEN), variance_epsilon=1e-6)
        return layer, (randn(tokens, HIDDEN),)
    if op in ("rms_norm+residual", "gemma_rms_norm+residual"):
        layer = SimpleNamespace(weight=randn(HIDDEN), variance_epsilon=1e-6)
        return layer, (randn(tokens, HIDDEN), randn(tokens, HIDDEN))
    moe = _moe_inputs(op, tokens, dtype, device)
    if moe is not None:
        return None, moe
    if op == "rotary_embedding":
        layer = SimpleNamespace(
            cos_sin_cache=_rotary_cache(dtype, device),
            head_size=HEAD_DIM,
            rotary_dim=HEAD_DIM,
            is_neox_style=True,
        )
        positions = torch.randint(0, MAX_POSITIONS, (tokens,), device=device)
        return layer, (
            positions,
            randn(tokens, NUM_HEADS * HEAD_DIM),
            randn(tokens, NUM_KV_HEADS * HEAD_DIM),
        )
    return None


def _moe_inputs(op: str, tokens: int, dtype: torch.dtype, device: str) -> tuple | None:
    """Arguments of the MoE function ops (no layer), at Qwen3-30B-A3B's sizes. Drawn on the CPU:
    a failed CUDA-graph capture of one backend must not leave the device's generator unusable."""
    E, K, H, I = MOE_EXPERTS, MOE_TOP_K, MOE_HIDDEN, MOE_INTERMEDIATE
    gen = torch.Generator().manual_seed(tokens)

    def randn(*shape, scale=1.0, dt=dtype):
        return (torch.randn(*shape, generator=gen) * scale).to(dt).to(device)

    ids = torch.rand(tokens, E, generator=gen).topk(K, dim=-1).indices.to(torch.int32).to(device)
    if op == "topk_softmax":
        outs = (torch.empty(tokens, K, device=device), torch.empty_like(ids), torch.empty_like(ids))
        return (*outs, randn(tokens, E), True)
    if op == "moe_align_block_size":
        padded = ids.numel() + E * (MOE_BLOCK - 1)
        if ids.numel() < E:
            padded = min(ids.numel() * MOE_BLOCK, padded)
        sorted_ids = torch.empty(padded, dtype=torch.int32, device=device)
        blocks = torch.empty(-(-padded // MOE_BLOCK), dtype=torch.int32, device=device)
        total = torch.empty(1, dtype=torch.int32, device=device)
        return ids, E, MOE_BLOCK, sorted_ids, blocks, total
    if op == "grouped_topk":  # DeepSeek-V3's routing: 256 experts in 8 groups
        return randn(tokens, 256), 8, 4, 8, True, 2.5, randn(256, scale=0.1), 1
    if op == "moe_sum":
        return randn(tokens, K, H), torch.empty(tokens, H, dtype=dtype, device=device)
    if op == "fused_experts":
        weights = torch.softmax(randn(tokens, K, dt=torch.float32), dim=-1)
        return (
            randn(tokens, H),
            randn(E, 2 * I, H, scale=0.02),
            randn(E, H, I, scale=0.02),
            weights,
            ids,
        )
    return None


def _nbytes(obj) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (tuple, list)):
        return sum(_nbytes(o) for o in obj)
    return 0


def _bytes_moved(layer, args, out) -> int:
    """Compulsory traffic: every input read once, every output written once."""
    read = _nbytes(args)
    if isinstance(getattr(layer, "weight", None), torch.Tensor):
        read += _nbytes(layer.weight)
    if isinstance(getattr(layer, "cos_sin_cache", None), torch.Tensor):
        read += args[0].numel() * layer.cos_sin_cache.shape[-1] * layer.cos_sin_cache.element_size()
    return read + _nbytes(out)


# --- timing -------------------------------------------------------------------------------------


def _time_us(fn: Callable[[], object], graph: bool) -> float:
    import triton.testing

    if graph:
        return triton.testing.do_bench_cudagraph(fn, rep=40) * 1000.0
    return triton.testing.do_bench(fn, warmup=10, rep=40) * 1000.0


def copy_bandwidth_gbps(device: str) -> float:
    """Device-to-device copy bandwidth, bytes read plus bytes written."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    us = _time_us(lambda: dst.copy_(src), graph=False)
    return 2 * src.numel() / (us * 1e-6) / 1e9


def _measure(fn, layer, args, graph: bool = True) -> tuple[float, float | None, object]:
    if layer is None:  # a function op
        call = lambda: fn(*args)  # noqa: E731
    else:
        call = lambda: fn(layer, *args)  # noqa: E731
    out = call()
    torch.cuda.synchronize()
    eager = _time_us(call, graph=False)
    return eager, (_time_us(call, graph=True) if graph else None), out


def _compiled_reference(ref_fn):
    # One compiled callable per (op, dtype): Dynamo marks the token dimension dynamic after the
    # second shape, so the sweep compiles twice per op and dtype instead of once per shape.
    return torch.compile(ref_fn, fullgraph=True)


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
        if _inputs(op, 1, torch.float16, device) is None or not impls:
            print(f"skip {op}: no benchmark shape or no available implementation", file=sys.stderr)
            continue
        selected = manager.get_selected_impl_id(op)
        for case in variants(op):
            for dtype in dtypes:
                for t in tokens:
                    plan.append((case, impls, selected, dtype, t))
    started = time.monotonic()
    compiled: dict[tuple[str, str], Callable] = {}
    for n, (op, impls, selected, dtype_name, t) in enumerate(plan, 1):
        dtype = getattr(torch, dtype_name)
        layer, args = _inputs(op, t, dtype, device)
        reference = next(i for i in impls if i.impl_id.startswith("reference"))
        candidates = [(i.impl_id, i.fn) for i in impls]
        if layer is not None:  # the MoE references have data-dependent shapes: nothing to compile
            if (op, dtype_name) not in compiled:
                compiled[op, dtype_name] = _compiled_reference(reference.fn)
            candidates.append(("compile(reference)", compiled[op, dtype_name]))
        for impl_id, fn in candidates:
            try:
                # The MoE references read sizes back to the host: they cannot be captured.
                capturable = layer is not None or not impl_id.startswith("reference")
                eager, graph, out = _measure(fn, layer, args, graph=capturable)
                moved = _bytes_moved(layer, args, out)
                row = Row(
                    op,
                    impl_id,
                    dtype_name,
                    t,
                    round(eager, 2),
                    None if graph is None else round(graph, 2),
                    moved,
                    round(moved / ((graph or eager) * 1e-6) / 1e9, 1),
                    impl_id == selected,
                )
            except Exception as exc:  # a backend failing on one shape is a result, not a crash
                row = Row(
                    op,
                    impl_id,
                    dtype_name,
                    t,
                    None,
                    None,
                    0,
                    None,
                    impl_id == selected,
                    error=f"{type(exc).__name__}: {exc}"[:200],
                )
            report.rows.append(row)
        elapsed = time.monotonic() - started
        print(
            f"\r[{n}/{len(plan)}] {op} {dtype_name} T={t}  {elapsed:.0f}s elapsed",
            end="",
            file=sys.stderr,
            flush=True,
        )
    print(file=sys.stderr)
    return report


# --- reporting ----------------------------------------------------------------------------------


def format_table(report: Report) -> str:
    lines = [
        f"device: {report.device}, torch {report.torch}, triton {report.triton}, "
        f"copy bandwidth {report.copy_gbps} GB/s, {report.date}",
        "latency in us: eager (launch included) / CUDA graph; GB/s and % of copy bandwidth from "
        "the graph time; * = selected by the current policy",
        f"{'op':<18}{'dtype':<10}{'tokens':>7}  {'backend':<20}{'eager':>10}{'graph':>10}"
        f"{'GB/s':>9}{'%copy':>7}",
    ]
    for r in report.rows:
        mark = "*" if r.selected else " "
        if r.error:
            lines.append(
                f"{r.op:<18}{r.dtype:<10}{r.tokens:>7} {mark}{r.backend:<20}" f"  error: {r.error}"
            )
            continue
        pct = 100.0 * r.gbps / report.copy_gbps
        graph = "-" if r.graph_us is None else f"{r.graph_us:.1f}"
        lines.append(
            f"{r.op:<18}{r.dtype:<10}{r.tokens:>7} {mark}{r.backend:<20}{r.eager_us:>10.1f}"
            f"{graph:>10}{r.gbps:>9.0f}{pct:>6.0f}%"
        )
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


def _token(impl_id: str) -> str:
    if impl_id.startswith("default."):
        return "flagos"
    if impl_id.startswith("reference."):
        return "reference"
    return "vendor:" + impl_id.split(".", 1)[1]


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
        lines.append(f"  {op}: [{', '.join(_token(b) for b in backends)}]")
    return "\n".join(lines), notes


def plot(report: Report, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot written (use --plot-only later)", file=sys.stderr)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", help="comma-separated ops (default: every registered op)")
    parser.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/bench_ops.json"))
    parser.add_argument("--plot", type=Path, default=Path("docs/bench_ops.png"))
    parser.add_argument("--plot-only", type=Path, help="plot an earlier JSON result and exit")
    args = parser.parse_args(argv)

    if args.plot_only:
        data = json.loads(args.plot_only.read_text())
        report = Report(**{**data, "rows": [Row(**r) for r in data["rows"]]})
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

    ops = args.ops.split(",") if args.ops else get_default_manager().registry.list_operators()
    report = run(ops, [int(t) for t in args.tokens.split(",")], args.dtypes.split(","), "cuda")
    print(format_table(report))
    text, notes = propose_policy(report)
    print("\nproposed platform policy (CUDA-graph timings):\n" + text, *notes, sep="\n")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(asdict(report), indent=1))
    plot(report, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where each FlagGems impl's eager time goes: host time per call and its split by origin.

In eager mode a small batch is bound by the host: each op costs the Python and C++ time spent
before its kernel is queued. For every op at decode size (1 token by default) this measures,
for the flagos impl (and its in-place eager variant, which vLLM runs outside torch.compile) and
for vLLM's own CUDA kernel, the host microseconds per call (calls queued back to back, no
synchronisation between them), and splits the flagos time with cProfile by where it is spent:
our impl code (``vllm_fl``), FlagGems' Python wrappers, Triton's Python launcher, torch's
Python, and C calls (torch ops, Triton's C launcher).

    python -m benchmarks.profile_flagos                        # every op, 1 token, bfloat16
    python -m benchmarks.profile_flagos --ops rotary_embedding --tokens 1,64 --json out.json
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
from pathlib import Path

import torch

from benchmarks.cases import bench_cases
from benchmarks.timing import wall_us

ORIGINS = ("vllm_fl", "flag_gems", "triton", "torch", "C: torch ops", "C: other")


def origin(filename: str, name: str) -> str:
    """The origin bucket of one cProfile entry (file, function name)."""
    if filename == "~":  # a C function: its name says whose
        return "C: torch ops" if "torch" in name or "Tensor" in name else "C: other"
    for key in ("vllm_fl", "flag_gems", "triton", "torch"):
        if f"/{key}/" in filename:
            return key
    if "flaggems" in filename or "code_cache" in filename:  # FlagGems' generated wrappers
        return "flag_gems"
    return "C: other" if filename.startswith("<") else "torch"


def host_us(call, calls: int = 300) -> float:
    """Host µs per call, calls queued back to back (median of 5 samples)."""
    return wall_us(call, calls, sync=torch.cuda.synchronize)


PROFILED_CALLS = 200


def profiled(call, calls: int = PROFILED_CALLS) -> dict:
    """cProfile's statistics of ``calls`` calls: (file, line, function) -> (..., tottime, ...)."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        call()
    profiler.disable()
    torch.cuda.synchronize()
    return pstats.Stats(profiler).stats


def split_by_origin(stats: dict) -> dict[str, float]:
    """Share (percent) of the profiled host time per origin."""
    totals = dict.fromkeys(ORIGINS, 0.0)
    for (filename, _line, name), (_cc, _nc, tottime, _ct, _callers) in stats.items():
        totals[origin(filename, name)] += tottime
    whole = sum(totals.values()) or 1.0
    return {k: round(100.0 * v / whole, 1) for k, v in totals.items()}


def top_functions(stats: dict, calls: int = PROFILED_CALLS, limit: int = 8) -> list[str]:
    """The functions with the most own time per call, for reading where a wrapper spends it."""
    ranked = sorted(stats.items(), key=lambda item: item[1][2], reverse=True)[:limit]
    return [
        f"{tottime / calls * 1e6:7.2f} us  {Path(f).name}:{line} {name}"
        for (f, line, name), (_cc, _nc, tottime, _ct, _callers) in ranked
    ]


def profile(ops: list[str], tokens: list[int], dtype_name: str, detail: bool) -> list[dict]:
    from vllm_fl.dispatch import get_default_manager

    manager = get_default_manager()
    dtype = getattr(torch, dtype_name)
    rows = []
    for op in ops:
        impls = {i.impl_id: i for i in manager.registry.get_implementations(op) if i.is_available()}
        flagos = impls.get("default.flagos")
        if flagos is None:
            continue
        candidates = [("flagos", flagos.fn)]
        eager = getattr(flagos.fn, "eager", None)
        if eager is not None:
            candidates.append(("flagos eager variant", eager))
        if "vendor.cuda" in impls:
            candidates.append(("cuda", impls["vendor.cuda"].fn))
            cuda_eager = getattr(impls["vendor.cuda"].fn, "eager", None)
            if cuda_eager is not None:
                candidates.append(("cuda eager variant", cuda_eager))
        for case in bench_cases(op):
            for t in [case.fixed_tokens] if case.fixed_tokens else tokens:
                try:
                    bound = case.build(t, dtype, "cuda")
                except Exception as exc:  # e.g. a layer vLLM cannot build here
                    print(f"skip {case.name}: {type(exc).__name__}: {exc}", file=sys.stderr)
                    continue
                for label, fn in candidates:
                    call = bound.bind(fn)
                    row = {"op": case.name, "impl": label, "tokens": t, "dtype": dtype_name}
                    try:
                        for _ in range(20):
                            call()
                        row["host_us"] = round(host_us(call), 2)
                        if label.startswith("flagos"):
                            stats = profiled(call)
                            row["origin_pct"] = split_by_origin(stats)
                            if detail:
                                row["top"] = top_functions(stats)
                    except Exception as exc:  # one failing impl is a result, not a crash
                        row["error"] = f"{type(exc).__name__}: {exc}"[:200]
                    rows.append(row)
                    print(_format_row(row), flush=True)
    return rows


def _format_row(row: dict) -> str:
    head = f"{row['op']:<24}{row['impl']:<22}{row['tokens']:>6}"
    if "error" in row:
        return f"{head}  error: {row['error']}"
    text = f"{head}{row['host_us']:>9.1f} us"
    if "origin_pct" in row:
        text += "  " + ", ".join(f"{k} {v:.0f}%" for k, v in row["origin_pct"].items() if v)
    for line in row.get("top", []):
        text += "\n      " + line
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", help="comma-separated ops (default: every op flagos implements)")
    parser.add_argument("--tokens", default="1")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--detail", action="store_true", help="print the top functions per impl")
    parser.add_argument("--json", type=Path, help="write the rows as JSON")
    parser.add_argument(
        "--triton-runner",
        action="store_true",
        help="launch plans go through Triton's runner, not its C launcher (the earlier path)",
    )
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("profile_flagos: no CUDA device; host launch costs need one", file=sys.stderr)
        return 0
    if args.triton_runner:
        from vllm_fl.kernels import launch

        launch._DIRECT_TRITON = ()
    from vllm_fl.dispatch import get_default_manager

    ops = args.ops.split(",") if args.ops else get_default_manager().registry.list_operators()
    print(f"{'op':<24}{'impl':<22}{'tokens':>6}{'host/call':>12}  split of the flagos time")
    rows = profile(ops, [int(t) for t in args.tokens.split(",")], args.dtype, args.detail)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

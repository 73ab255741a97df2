"""What bring-up mode costs per call, op by op: the selected impl alone against the same call
verified (`vllm_fl.verify`: copies, the reference in the call's dtype and in a wider one, the
comparison; the numbers read back once at the end, as the engine does once per step).

    python -m benchmarks.bench_verify [--ops rms_norm,...] [--tokens 1,210] [--dtype bfloat16]
        [--device cuda] [--calls 200]

Inputs are the ops' benchmark cases (`benchmarks.cases`, from ops.yaml's test cases at model
size). Host wall time per call, the device synchronised at the end of each series: in eager mode
that is what an engine step pays. Where the selected impl is the reference (a CPU), the reference
is timed as if it were another backend's impl, so that verification runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

import torch

from benchmarks.cases import bench_cases
from vllm_fl.dispatch import BackendImplKind, get_default_manager
from vllm_fl.verify.verifier import Verifier

OPS = "rms_norm,silu_and_mul,rotary_embedding,reshape_and_cache_flash,paged_attention"


def _timed(call, device: str, calls: int, after=None) -> float:
    """Microseconds per call of ``call`` (host wall time, device synchronised at the end)."""
    for _ in range(3):
        call()
    if after is not None:
        after()
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    if after is not None:
        after()
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def run(ops: list[str], tokens: list[int], dtype: str, device: str, calls: int) -> list[dict]:
    manager = get_default_manager()
    rows = []
    for op in ops:
        impls = manager.registry.get_implementations(op)
        reference = next(i for i in impls if i.kind is BackendImplKind.REFERENCE)
        selected_id = manager.get_selected_impl_id(op)
        selected = next(i for i in impls if i.impl_id == selected_id)
        if selected.kind is BackendImplKind.REFERENCE:
            selected = dataclasses.replace(
                selected, kind=BackendImplKind.VENDOR, vendor="as-vendor"
            )
        case = bench_cases(op)[0]
        for t in [case.fixed_tokens] if case.fixed_tokens else tokens:
            call = case.build(t, getattr(torch, dtype), device)
            verifier = Verifier(ops=True)
            verified = verifier.wrap(op, selected, manager.registry)
            impl_us = _timed(call.bind(selected.fn), device, calls)
            ref_us = _timed(call.bind(reference.fn), device, calls)
            verified_us = _timed(call.bind(verified), device, calls, verifier.recorder.flush)
            report = verifier.recorder.to_json()
            rows.append(
                {
                    "op": op,
                    "tokens": t,
                    "impl": selected_id,
                    "impl_us": round(impl_us, 1),
                    "reference_us": round(ref_us, 1),
                    "verified_us": round(verified_us, 1),
                    "ratio": round(verified_us / impl_us, 1),
                    "verified": sum(r["calls"] for r in report["rows"]),
                    "over_tolerance": sum(r["exceeded"] for r in report["rows"]),
                    "not_verified": sum(r["unverified"] for r in report["rows"]),
                }
            )
            print(
                f"{op:<24} {t:>6} {selected_id:<16} {impl_us:>9.1f} {ref_us:>9.1f} "
                f"{verified_us:>10.1f} {verified_us / impl_us:>7.1f}x",
                flush=True,
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_verify", description=__doc__)
    parser.add_argument("--ops", default=OPS)
    parser.add_argument("--tokens", default="1,210")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args(argv)
    print(
        f"{'op':<24} {'tokens':>6} {'impl':<16} {'impl us':>9} {'ref us':>9} "
        f"{'verified us':>10} {'ratio':>8}"
    )
    rows = run(
        args.ops.split(","),
        [int(t) for t in args.tokens.split(",")],
        args.dtype,
        args.device,
        args.calls,
    )
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())

"""Eager cost of a replaced vLLM layer: vLLM's own `forward_cuda` against our `forward_oot`.

Both methods live on the same layer object (our generated class subclasses vLLM's), so one
process on one GPU compares them call for call: host time per call (calls queued back to back,
`timing.wall_us`) and GPU time per call (`timing.gpu_us`). Every op of ops.yaml with a
layer is measured, on the inputs of its benchmark cases (cases.py: its test cases at the model
sizes of `benchmarks.shapes`). Run on a GPU with vLLM installed and the plugin's platform off:

    VLLM_PLUGINS=none python -m benchmarks.bench_layers [--tokens 1,256,8192] [--ops rms_norm]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from benchmarks.cases import BenchCase, Call, bench_cases, make_layer, manifest
from benchmarks.cli import int_list, name_list, write_json
from benchmarks.tables import Column, text_table
from benchmarks.timing import gpu_us, wall_us


def layer_cases(ops: list[str] | None = None) -> list[tuple[BenchCase, str]]:
    """(case, import path of our out-of-tree class) for every benchmark case of an op with a
    layer, or of `ops`."""
    from vllm_fl.ops import OOT_CLASSES

    names = ops or [op.name for op in manifest().ops if op.layer is not None]
    out = []
    for name in names:
        for case in bench_cases(name):
            if case.layer is not None:
                in_tree = case.layer.rsplit(".", 1)[1]
                out.append((case, OOT_CLASSES[in_tree].replace(":", ".")))
    return out


def label(case: BenchCase) -> str:
    """The row's name: the in-tree class and the case's variant, e.g. ``RMSNorm+residual``."""
    return case.layer.rsplit(".", 1)[1] + case.name[len(case.op) :]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int_list, default="1,256,8192")
    parser.add_argument("--iters", type=int, default=500)
    parser.add_argument("--ops", type=name_list, help="comma-separated ops (default: every layer)")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = parser.parse_args(argv)
    layer_ops = [op.name for op in manifest().ops if op.layer is not None]
    unknown = [op for op in args.ops or () if op not in layer_ops]
    if unknown:
        parser.error(
            f"--ops: {', '.join(unknown)} not an op with a layer in ops.yaml; "
            f"allowed: {', '.join(layer_ops)}"
        )
    if not torch.cuda.is_available():
        print("bench_layers: needs a CUDA device", file=sys.stderr)
        return 0
    from vllm_fl.dispatch import get_default_manager

    dtype = torch.bfloat16
    cases = [
        (case, make_layer(path, case.init(), dtype, "cuda")) for case, path in layer_cases(args.ops)
    ]
    get_default_manager().resolve_all()
    rows = []
    for t in args.tokens:
        for case, layer in cases:
            call = case.arguments(t, dtype, "cuda")
            # Fresh clones per method: both may write into their inputs, as vLLM's kernels do.
            cuda = _clones(call).bind(layer.forward_cuda)
            oot = _clones(call).bind(layer.forward_oot)
            rows.append((label(case), t, *_times(cuda, args.iters), *_times(oot, args.iters)))
    columns = [
        Column("layer", align="<"),
        Column("tokens"),
        Column("forward_cuda host us", ".1f"),
        Column("gpu us", ".1f"),
        Column("forward_oot host us", ".1f"),
        Column("gpu us", ".1f"),
    ]
    print(text_table(columns, rows))
    print("impls used by forward_oot:", get_default_manager().used_impls())
    if args.json:
        keys = ("layer", "tokens", "cuda_host_us", "cuda_gpu_us", "oot_host_us", "oot_gpu_us")
        write_json(args.json, [dict(zip(keys, row)) for row in rows])
    return 0


def _times(fn, iters: int) -> tuple[float, float]:
    """(host µs per call, calls queued back to back; GPU µs per call)."""
    fn()
    return wall_us(fn, iters, sync=torch.cuda.synchronize), gpu_us(fn)


def _clones(call: Call) -> Call:
    def clone(value):
        return value.clone() if isinstance(value, torch.Tensor) else value

    return Call(None, tuple(map(clone, call.args)), {k: clone(v) for k, v in call.kwargs.items()})


if __name__ == "__main__":
    sys.exit(main())

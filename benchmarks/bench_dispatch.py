"""Dispatch overhead, in ns per call (median of repeated runs).

The impl is a trivial function (returns its input), so every nanosecond above the direct call is
dispatch overhead. Rows:
  direct impl call           impl(layer, x)
  layer.forward_oot(x)       through dispatch_method: the op has one candidate, so nothing can
                             fall back and the class holds the impl itself (direct binding)
  bound forward_oot          what vLLM's CustomOp stores in _forward_method at __init__
  trampoline (2 candidates)  layer.forward_oot(x) of an op with a second candidate to fall back
                             to (strict off): the class holds the op's trampoline
  call_op                    call_op("bench_op", layer, x) on the default manager: an op
                             outside ops.yaml, so through the generic (*args, **kwargs)
                             trampoline (vllm_fl.dispatch.runtime.trampoline)
  replaced function          mod.fn(x): a function op (ops.yaml `function:`) as vLLM calls it,
                             the module attribute holding the op's trampoline
                             (vllm_fl.functions.install), against the impl called directly
  manager.call               OpManager.call("rms_norm", layer, x)
  fallback path              first impl raises on every call (strict off): it is excluded after
                             the first failure, so steady state is the second impl, the last
                             candidate left (so bound directly); the row
                             "fallback (reselect+raise)" forgets the failure before each call:
                             re-resolution + the raise + the fallback to the next impl.

Run: python -m benchmarks.bench_dispatch [--repeat 15] [--number 200000] [--json FILE]
(`python -m benchmarks.report` renders the docs' table from such a file.)
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import sys
import time
import types
from pathlib import Path

from types import MethodType

from benchmarks.cli import write_json
from benchmarks.tables import Column, text_table
from benchmarks.timing import interleaved_medians, wall_us

from vllm_fl.dispatch import (
    OpImpl,
    OpManager,
    OpRegistry,
    SelectionPolicy,
    call_op,
    dispatch_method,
    get_default_manager,
    reset_default_manager,
    reset_global_policy,
    set_global_policy,
)


def impl(self, x, residual=None):
    return x


def function_impl(input, output, topk_ids=None, expert_map=None):
    """moe_sum's signature (ops.yaml): the trampoline of a manifest op."""
    return output


def broken(self, x, residual=None):
    raise RuntimeError("broken impl")


class Layer:
    forward_oot = None  # replaced below


def measure(rows, number: int, repeat: int, glb) -> list[tuple[str, float]]:
    """Median ns/call per row (name, statement, calls per sample or 0 for `number`); the rows are
    timed round-robin, so load on the machine during the run affects every row alike."""
    samplers = [
        lambda stmt=stmt, n=n: wall_us(stmt, n or number, repeat=1, namespace=glb) * 1e3
        for _, stmt, n in rows
    ]
    return list(zip([name for name, _, _ in rows], interleaved_medians(samplers, repeat)))


def format_table(rows: list[dict]) -> str:
    columns = [Column("path", align="<"), Column("ns/call", ".1f"), Column("overhead", "+.1f")]
    return text_table(columns, [(r["path"], r["ns"], r["overhead_ns"]) for r in rows])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--number", type=int, default=200_000)
    ap.add_argument("--json", type=Path, help="also write the results as JSON")
    args = ap.parse_args(argv)
    # The fallback rows' warnings stay off the table; the policy and the default manager this
    # run changes are restored afterwards.
    logging.disable(logging.WARNING)
    try:
        rows = measure_paths(args.number, args.repeat)
    finally:
        logging.disable(logging.NOTSET)
        reset_global_policy()
        reset_default_manager()
    base = rows[0][1]
    result = {
        "python": sys.version.split()[0],
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "date": time.strftime("%Y-%m-%d"),
        "repeat": args.repeat,
        "number": args.number,
        "rows": [
            {"path": name, "ns": round(ns, 1), "overhead_ns": round(ns - base, 1)}
            for name, ns in rows
        ],
    }
    print(f"Python {result['python']}, median of {args.repeat} runs")
    print(format_table(result["rows"]))
    if args.json:
        write_json(args.json, result)
    return 0


def measure_paths(n: int, r: int) -> list[tuple[str, float]]:
    """(path, median ns per call) for every row of the module docstring."""
    reg = OpRegistry()
    reg.register_impl(OpImpl("rms_norm", "reference.torch", "reference", impl))
    m = OpManager(registry=reg)

    class L:
        forward_oot = dispatch_method("rms_norm", manager=m)

    layer = L()
    layer.forward_oot(1)  # resolve + install
    bound = layer.forward_oot

    # an op with a candidate to fall back to: the class holds the trampoline
    treg = OpRegistry()
    treg.register_many(
        [
            OpImpl("rms_norm", "default.flagos", "flagos", impl),
            OpImpl("rms_norm", "reference.torch", "reference", impl),
        ]
    )
    tm = OpManager(registry=treg)

    class T:
        forward_oot = dispatch_method("rms_norm", manager=tm)

    tlayer = T()
    tlayer.forward_oot(1)  # resolve + install

    # a function op: the trampoline installed as a module attribute, as vllm_fl.functions does
    freg_fn = OpRegistry()
    freg_fn.register_impl(OpImpl("moe_sum", "reference.torch", "reference", function_impl))
    fn_manager = OpManager(registry=freg_fn)
    vllm_module = types.ModuleType("fake_vllm_custom_ops")
    dispatch_method("moe_sum", manager=fn_manager).__set_name__(vllm_module, "moe_sum")
    vllm_module.moe_sum(1, 1)  # resolve + install

    # call_op on the default manager, with the test impl registered into it
    reset_default_manager()
    dm = get_default_manager()
    dm.registry.register_impl(OpImpl("bench_op", "reference.bench", "reference", impl))
    call_op("bench_op", layer, 1)

    # fallback: first impl always raises
    freg = OpRegistry()
    freg.register_many(
        [
            OpImpl("rms_norm", "default.flagos", "flagos", broken),
            OpImpl("rms_norm", "reference.torch", "reference", impl),
        ]
    )
    fm = OpManager(registry=freg)

    class F:
        forward_oot = dispatch_method("rms_norm", manager=fm)

    flayer = F()
    flayer.forward_oot(1)  # falls back once, then the reference is installed

    def fallback_each_call(x):
        fm.clear_failed_impls()  # forget the failure: the next call raises and falls back again
        return flayer.forward_oot(x)

    g = dict(
        impl=impl,
        layer=layer,
        tlayer=tlayer,
        bound=bound,
        bound_impl=MethodType(impl, layer),
        call_op=call_op,
        m=m,
        flayer=flayer,
        fallback_each_call=fallback_each_call,
        function_impl=function_impl,
        vllm_module=vllm_module,
        x=1,
    )
    rows = measure(
        [
            ("direct impl call", "impl(layer, x)", 0),
            ("layer.forward_oot(x)", "layer.forward_oot(x)", 0),
            ("bound impl (MethodType)", "bound_impl(x)", 0),
            ("bound forward_oot(x)", "bound(x)", 0),
            ("trampoline (2 candidates)", "tlayer.forward_oot(x)", 0),
            ("call_op(op, layer, x)", "call_op('bench_op', layer, x)", 0),
            ("direct function impl", "function_impl(x, x)", 0),
            ("replaced function mod.fn(x)", "vllm_module.moe_sum(x, x)", 0),
            ("manager.call(op, layer, x)", "m.call('rms_norm', layer, x)", 0),
            ("fallback (steady state)", "flayer.forward_oot(x)", 0),
            ("fallback (reselect+raise)", "fallback_each_call(x)", max(n // 200, 50)),
        ],
        n,
        r,
        g,
    )
    # An op whose selection under torch.compile differs (compile_prefer): the trampoline adds a
    # torch.compiler.is_compiling() branch for eager calls. Timed apart, against its own baseline,
    # because the policy is process-wide.
    sreg = OpRegistry()
    sreg.register_many(
        [
            OpImpl("rms_norm", "default.flagos", "flagos", impl),
            OpImpl("rms_norm", "reference.torch", "reference", impl),
        ]
    )
    sm = OpManager(registry=sreg)

    class S:
        forward_oot = dispatch_method("rms_norm", manager=sm)

    set_global_policy(SelectionPolicy.from_dict(prefer="flagos", compile_prefer="reference"))
    g["slayer"] = S()
    g["slayer"].forward_oot(1)
    (_, split_base), (_, split_ns) = measure(
        [("direct impl call", "impl(layer, x)", 0), ("split", "slayer.forward_oot(x)", 0)], n, r, g
    )
    rows.append(("forward_oot, compile_prefer", split_ns - split_base + rows[0][1]))
    return rows


if __name__ == "__main__":
    sys.exit(main())

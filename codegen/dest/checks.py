"""``vllm_fl/dispatch/checks.py``: how each op's result is checked against its reference at run
time (``vllm_fl.verify``): the parity tests' tolerances per dtype, the arguments it writes into,
the arguments whose dtype is the dtype under test, its canonical form, its KV-cache
arguments and its length bounds. Plain data, so the
runtime reads the manifest's numbers without reading the manifest."""

from __future__ import annotations

from dataclasses import dataclass

from .. import model as m
from ..render import render_file

PATH = "vllm_fl/dispatch/checks.py"


@dataclass(frozen=True)
class _CheckView:
    op: str
    args: tuple[str, ...]
    layer: bool
    mutates: tuple[str, ...]
    inplace: tuple[str, ...]
    dtype_from: tuple[str, ...]
    canonical: str | None
    cache: tuple[str, ...]
    slots: str | None
    bounds: tuple[str, ...]
    tolerances: tuple[tuple[str, float, float], ...]


def _dtype_from(op: m.Op) -> tuple[str, ...]:
    """The arguments whose dtype selects the tolerance: those the op's test cases draw in the
    dtype under test, else every floating-point tensor argument (none: the first output's)."""
    if op.tests is not None:
        found: list[str] = []
        for case in op.tests.cases:
            for name, spec in case.inputs:
                drawn = m.tensor_inputs(spec)
                if any(t.dtype == m.DTYPE_PLACEHOLDER for t in drawn) and name not in found:
                    found.append(name)
        return tuple(a for a in op.schema.arg_names if a in found)
    return tuple(
        a.name for a in op.schema.arguments if a.type.is_tensor and a.name not in op.mutates
    )


def _view(manifest: m.Manifest, op: m.Op) -> _CheckView:
    reference = manifest.reference
    assert reference is not None
    tolerances = dict(manifest.tolerances)
    canonical = None
    if op.tests is not None:
        tolerances.update(dict(op.tests.tolerances))
        if op.tests.canonical is not None:
            module, function = op.tests.canonical
            canonical = f"{reference.package}.impl.{module}:{function}"
    return _CheckView(
        op=op.name,
        args=op.schema.arg_names,
        layer=op.has_self,
        mutates=op.mutates,
        inplace=op.inplace,
        dtype_from=_dtype_from(op),
        canonical=canonical,
        cache=op.cache.tensors if op.cache else (),
        slots=op.cache.slots if op.cache else None,
        bounds=op.bounds,
        tolerances=tuple((d, t.atol, t.rtol) for d, t in sorted(tolerances.items())),
    )


def emit(manifest: m.Manifest) -> dict[str, str]:
    """The table of every op that has a reference impl (nothing else can be verified)."""
    if manifest.reference is None:
        return {}
    checks = [_view(manifest, op) for op in manifest.ops if manifest.reference_impl(op)]
    return {PATH: render_file("checks.py.j2", PATH, checks=checks)}

"""``tests/generated``: one parity test module per op with tests, and their shared conftest.

Collectives are not among them: they run on several processes, all in one module
(``collective_tests``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .. import model as m
from ..render import render_file

DIR = "tests/generated"
CONFTEST = f"{DIR}/conftest.py"
SEED = 20240601


def module_path(op: m.Op) -> str:
    return f"{DIR}/test_parity_{op.name}.py"


def tested(manifest: m.Manifest) -> list[m.Op]:
    """The ops that get a parity module: those with tests, but the collectives."""
    return [op for op in manifest.ops if op.tests is not None and op.collective is None]


@dataclass(frozen=True)
class _CaseView:
    id: str
    init: dict
    inputs: dict


def _case_view(index: int, case: m.Case, reference_package: str | None) -> _CaseView:
    parts = []
    inputs: dict[str, dict] = {}
    for name, spec in case.inputs:
        if isinstance(spec, m.TensorInput):
            item: dict[str, object] = {"shape": spec.shape, "dtype": spec.dtype}
            if spec.high is not None:
                item["high"] = spec.high
            if spec.scale is not None:
                item["scale"] = spec.scale
            if spec.values is not None:
                item["values"] = spec.values
            inputs[name] = item
            parts.append(name + "x".join(str(d) for d in spec.shape))
        elif isinstance(spec, m.QuantizedInput):
            inputs[name] = _quantized_view(spec)
            parts.append(name + "x".join(str(d) for d in spec.shape) + "-" + spec.scheme)
        elif isinstance(spec, m.DerivedInput):
            assert reference_package is not None  # tests need a reference impl (the loader)
            inputs[name] = {"derive": f"{reference_package}.impl.{spec.module}:{spec.function}"}
            parts.append(f"{name}=derived")
        else:
            inputs[name] = {"value": spec.value}
            parts.append(f"{name}={literal_id(spec.value)}")
    return _CaseView(case_id(index, parts), dict(case.init), inputs)


def literal_id(value: object) -> str:
    """A literal input in a test id: ``3_2`` for the list [3, 2]."""
    if isinstance(value, tuple):
        return "_".join(str(v) for v in value)
    return str(value)


def case_id(index: int, parts: list[str]) -> str:
    """The id of case ``index`` from its inputs' parts (``x7x256``, ``dim=-1``): pytest-safe."""
    return re.sub(r"[^A-Za-z0-9_.=-]", "_", "-".join([f"case{index}"] + parts))


def _quantized_view(spec: m.QuantizedInput) -> dict[str, object]:
    item: dict[str, object] = {"quantize": spec.shape, "scheme": spec.scheme}
    if spec.group is not None:
        item["group"] = spec.group
    item["scales"] = spec.scales
    if spec.zeros is not None:
        item["zeros"] = spec.zeros
    if spec.transpose:
        item["transpose"] = True
    if spec.scale is not None:
        item["scale"] = spec.scale
    return item


def emit(manifest: m.Manifest) -> dict[str, str]:
    out: dict[str, str] = {}
    reference = manifest.reference
    ops = tested(manifest)
    if not ops:
        return out
    assert reference is not None
    out[CONFTEST] = render_file(
        "parity_conftest.py.j2", CONFTEST, seed=SEED, reference_id=reference.impl_id
    )
    for op in ops:
        assert op.tests is not None
        path = module_path(op)
        # the reference is checked on its own (its contract, vLLM's forward_native), never
        # against itself
        backends = [
            manifest.backend(impl.backend)
            for impl in op.impls
            if manifest.backend(impl.backend).kind != "reference"
        ]
        eager = [manifest.backend(impl.backend) for impl in op.impls if impl.eager is not None]
        op_reference = manifest.reference_of(op)
        # tests need a reference impl (the loader checks)
        package = op_reference.package if op_reference is not None else None
        cases = [_case_view(i, c, package) for i, c in enumerate(op.tests.cases)]
        canonical = None
        if op.tests.canonical is not None:
            module, function = op.tests.canonical
            canonical = f"{package}.impl.{module}:{function}"
        round_trip = None
        if op.tests.round_trip is not None:
            module, function = op.tests.round_trip.function
            round_trip = f"{package}.impl.{module}:{function}"
        # keyword arguments of parity.check beyond the common ones
        check_options = ("" if not op.mutates else ", mutates=MUTATES") + (
            "" if canonical is None else ", canonical=CANONICAL"
        )
        reads = [attr.name for attr in op.reads]
        # keyword arguments of parity.check_reference beyond the common ones
        reference_options = (", READS" if op.layer is not None else "") + (
            ", mutates=MUTATES" if op.mutates else ""
        )
        # vLLM keeps some weights in float32 under half-precision inputs
        weight_dtypes = [d for d in op.tests.dtypes if d != "float32"] if "weight" in reads else []
        # the fused add + normalisation: an op of a layer taking ``x`` and a ``residual``
        residual = op.layer is not None and {"x", "residual"} <= set(op.schema.arg_names)
        out[path] = render_file(
            "test_parity.py.j2",
            path,
            op=op,
            backends=backends,
            eager=eager,
            cases=cases,
            canonical=canonical,
            round_trip=round_trip,
            reference_id=reference.impl_id,
            check_options=check_options,
            reference_options=reference_options,
            returns=[str(form) for form in op.schema.returns.forms],
            reads=reads,
            weight_dtypes=weight_dtypes,
            residual=residual,
        )
    return out

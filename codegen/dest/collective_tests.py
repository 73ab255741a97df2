"""``tests/generated/test_collectives.py``: the tests of every collective op with ``tests:``, in
one module, since a collective runs on several processes.

The module holds the manifest's spec of them (per op: the communicator method, the impl ids of
every backend implementing it, reference first, the dtypes' tolerances and the cases with every
argument given), one fixture that runs them all in one spawn of ``WORLD_SIZE`` CPU processes
over gloo (``vllm_fl.testing.collectives.run_collectives``) and one test per op x impl x dtype x
case reading the result.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import model as m
from ..render import render_file
from ..signature import FunctionSchema
from .parity import DIR, SEED, case_id, literal_id

PATH = f"{DIR}/test_collectives.py"
#: the processes of the group the collectives run on (a per-rank input gives one input each)
WORLD_SIZE = m.COLLECTIVE_WORLD_SIZE


def tested(manifest: m.Manifest) -> list[m.Op]:
    """The collective ops with tests, in manifest order."""
    return [op for op in manifest.ops if op.collective is not None and op.tests is not None]


@dataclass(frozen=True)
class _ImplView:
    impl_id: str
    backend: str  # the backend's name, in test ids


@dataclass(frozen=True)
class _CaseView:
    id: str
    #: every argument of the signature in order: name -> {shape, dtype, ...} or {value}
    args: dict[str, dict[str, object]]


@dataclass(frozen=True)
class _OpView:
    name: str
    method: str
    receiver: str | None  # send: the op replacing recv, which receives what it sends
    impls: list[_ImplView]
    tolerances: list[tuple[str, m.Tolerance]]
    cases: list[_CaseView]


def _argument(spec: m.Input) -> dict[str, object]:
    """A case's input as the harness draws it (``vllm_fl.testing.collectives``)."""
    if isinstance(spec, m.LiteralInput):
        return {"value": spec.value}
    if isinstance(spec, m.TensorListInput):
        return {"tensors": [_argument(item) for item in spec.items]}
    if isinstance(spec, m.PerRankInput):
        return {"per_rank": [_argument(item) for item in spec.ranks]}
    assert isinstance(spec, m.TensorInput)  # the loader refuses other inputs for collectives
    item: dict[str, object] = {"shape": spec.shape, "dtype": spec.dtype}
    for key in ("high", "scale", "values"):
        if getattr(spec, key) is not None:
            item[key] = getattr(spec, key)
    return item


def _id_part(name: str, spec: m.Input) -> str:
    """An input in a test id: ``input_3x5``, ``dim=0``, ``input_3x4_3`` (a list),
    ``input_3x4.2x4`` (rank 0's, rank 1's)."""
    if isinstance(spec, m.LiteralInput):
        return f"{name}={literal_id(spec.value)}"
    if isinstance(spec, m.TensorListInput):
        return name + "_".join(_id_part("", item) for item in spec.items)
    if isinstance(spec, m.PerRankInput):
        parts = [_id_part(name, item) for item in spec.ranks]
        if all(isinstance(item, m.LiteralInput) for item in spec.ranks):
            return parts[0] + "".join("." + p.split("=", 1)[1] for p in parts[1:])
        return parts[0] + "".join("." + p[len(name) :] for p in parts[1:])
    assert isinstance(spec, m.TensorInput)
    return name + "x".join(str(d) for d in spec.shape)


def _case_view(index: int, case: m.Case, schema: FunctionSchema) -> _CaseView:
    given = dict(case.inputs)
    args: dict[str, dict[str, object]] = {}
    parts = []
    for arg in schema.arguments:
        spec = given.get(arg.name)
        if spec is None:  # the loader checked the argument has a default
            args[arg.name] = {"value": arg.default_value}
            continue
        args[arg.name] = _argument(spec)
        parts.append(_id_part(arg.name, spec))
    return _CaseView(case_id(index, parts), args)


def _op_view(manifest: m.Manifest, op: m.Op) -> _OpView:
    assert op.tests is not None and op.collective is not None
    backends = [manifest.backend(impl.backend) for impl in op.impls]
    # the reference first: the ground truth's failures read first
    backends.sort(key=lambda b: b.kind != "reference")
    receiver = None
    if op.collective == "send":  # the loader checked there is one, with the same backends
        receiver = next(o.name for o in manifest.ops if o.collective == "recv")
    return _OpView(
        op.name,
        op.collective,
        receiver,
        [_ImplView(b.impl_id, b.name) for b in backends],
        list(op.tests.tolerances),
        [_case_view(i, c, op.schema) for i, c in enumerate(op.tests.cases)],
    )


def emit(manifest: m.Manifest) -> dict[str, str]:
    ops = tested(manifest)
    if not ops:
        return {}
    views = [_op_view(manifest, op) for op in ops]
    return {
        PATH: render_file(
            "test_collectives.py.j2", PATH, ops=views, world_size=WORLD_SIZE, seed=SEED
        )
    }

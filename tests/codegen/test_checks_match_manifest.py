"""The generated table bring-up mode reads (``vllm_fl/dispatch/checks.py``) says what ops.yaml
says: an entry per op with a reference impl, its arguments, the arguments it writes, its canonical
form in the reference package, and per dtype the parity tests' tolerance (the op's own, else the
top-level one), so a verified call is held to what its parity test holds it to."""

from __future__ import annotations

import importlib

from codegen.manifest import project_manifest
from vllm_fl.dispatch.checks import CHECKS


def test_every_op_with_a_reference_has_its_manifest_entry():
    manifest = project_manifest()
    reference = manifest.reference
    assert set(CHECKS) == {op.name for op in manifest.ops if manifest.reference_impl(op)}
    top = {dtype: (t.atol, t.rtol) for dtype, t in manifest.tolerances}
    for op in manifest.ops:
        if op.name not in CHECKS:
            continue
        entry = CHECKS[op.name]
        assert entry["args"] == op.schema.arg_names
        assert entry["layer"] is op.has_self
        assert (entry["mutates"], entry["inplace"]) == (op.mutates, op.inplace)
        assert set(entry["dtype_from"]) <= set(op.schema.arg_names)
        own = {d: (t.atol, t.rtol) for d, t in op.tests.tolerances} if op.tests else {}
        assert entry["tolerances"] == {**top, **own}, op.name
        if op.tests is not None and op.tests.canonical is not None:
            module, _, function = entry["canonical"].partition(":")
            assert module == f"{reference.package}.impl.{op.tests.canonical[0]}"
            assert callable(getattr(importlib.import_module(module), function))
        else:
            assert entry["canonical"] is None

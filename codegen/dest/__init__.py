"""Emitters, one module per kind of generated output, each a function from the model to
``{path: text}``:

- ``spec``: the backend contract ``FLBackendBase``;
- ``trampolines``: each op's dispatch trampolines (the functions every caller holds);
- ``checks``: how each op is checked against its reference at run time (tolerances, outputs);
- ``builtin_backends``: the list of built-in backend packages;
- ``register_ops``: every backend's table of registrations (impls, adapters, custom ops);
- ``oot``: the out-of-tree ``CustomOp`` classes under ``vllm_fl/ops``;
- ``collectives``: the collectives as methods of the plugin's device communicator;
- ``parity``: the parity tests under ``tests/generated``;
- ``collective_tests``: the collectives' tests, one module under ``tests/generated``;
- ``docs``: ``docs/operators.md`` and the operator table of the README.

Views computed here (call expressions, import aliases, table rows) keep the
templates free of logic: the model computes, the template lays out.
"""

from __future__ import annotations

from pathlib import Path

from .. import model as m
from . import (
    builtin_backends,
    checks,
    collective_tests,
    collectives,
    docs,
    oot,
    parity,
    register_ops,
    spec,
    trampolines,
)


def emit_all(manifest: m.Manifest, root: Path) -> dict[str, str]:
    """Every generated output of ``manifest`` (the README's is the whole README, its table
    region replaced)."""
    out: dict[str, str] = {}
    out.update(spec.emit(manifest))
    out.update(trampolines.emit(manifest))
    out.update(checks.emit(manifest))
    out.update(builtin_backends.emit(manifest))
    for backend in manifest.backends:
        out.update(register_ops.emit(manifest, backend))
    out.update(oot.emit(manifest))
    out.update(collectives.emit(manifest))
    out.update(parity.emit(manifest))
    out.update(collective_tests.emit(manifest))
    out.update(docs.emit(manifest, root))
    return out

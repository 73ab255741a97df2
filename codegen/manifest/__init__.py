"""Load ops.yaml into the model (``codegen.model``), refusing to guess.

Every mapping is read through :class:`~codegen.yamlnodes.Fields`: keys are popped one by one and
anything left over is an error. Every error is ``ops.yaml:<line>: <what is wrong>, expected
<what>``. One module reads each section on the typed readers of ``reader``:

- ``backends``: ``backends:``; ``tolerances``: the tolerance tables;
- ``ops``: one op entry, with ``targets`` (``layer``/``function``/``reads``), ``arguments``
  (``inplace``/``mutates``), ``impls`` and ``tests``.

Cross-references (backends named by impls, reference impls for tests, opaque return forms) are
checked once the entries they need are read; ``targets.check_targets`` checks the ops together,
``targets.check_collective_pairs`` that a tested send has a recv of the same backends.
"""

from __future__ import annotations

import functools

from .. import model as m
from .backends import read_backends
from .ops import read_op
from .reader import Reader, is_dotted, is_identifier
from .targets import check_collective_pairs, check_targets
from .tolerances import read_tolerances
from ..resources import PROJECT_MANIFEST
from ..sources import read_text
from ..yamlnodes import Node, load

__all__ = ["load_manifest", "project_manifest", "is_identifier", "is_dotted"]

KEYS = ("backends", "tolerances", "ops")
EXPECTED = "a mapping with backends, tolerances, ops"


def load_manifest(text: str, file: str = "ops.yaml") -> m.Manifest:
    """Parse and validate manifest text; raises ManifestError naming the line."""
    return _document(Reader(file), load(text, file))


@functools.cache
def project_manifest() -> m.Manifest:
    """The repository's ops.yaml as the model, loaded once per process: the one way tests and
    tools that ask the manifest read it (the CLI reads ``--manifest`` under ``--root``)."""
    return load_manifest(read_text(PROJECT_MANIFEST, PROJECT_MANIFEST.name), PROJECT_MANIFEST.name)


def _document(r: Reader, root: Node | None) -> m.Manifest:
    if root is None:
        raise r.error(1, "the manifest is empty", EXPECTED)
    top = r.fields(root, "the manifest", EXPECTED, KEYS)
    backends_entry = top.require("backends", "a mapping of backend name -> settings")
    tolerances_entry = top.pop("tolerances")
    ops_entry = top.require("ops", "a mapping of op name -> definition")
    top.done()

    backends = read_backends(r, backends_entry)
    tolerances = (
        read_tolerances(r, tolerances_entry.value, "tolerances") if tolerances_entry else ()
    )
    ops_map = r.map(ops_entry.value, "ops", "a mapping of op name -> definition")
    if not ops_map.entries:
        raise r.error(ops_entry.key_line, "ops is empty", "at least one op")
    by_name = {b.name: b for b in backends}
    ops = tuple(read_op(r, entry, by_name, dict(tolerances)) for entry in ops_map.entries.values())
    check_targets(r, ops)
    check_collective_pairs(r, ops)
    return m.Manifest(r.file, backends, tolerances, ops)

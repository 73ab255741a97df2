"""The ``ops:`` section of a vendor package's ``vendor.yaml``: ops the package declares itself.

Each entry has the format of an op of the plugin's ops.yaml and is read by the same reader
(``ops.read_op``), the plugin's tolerances as defaults. Its ``impls`` name two backends: the
package's vendor backend and ``reference``, the package's own PyTorch reference, whose functions
live in the package's ``impl/`` next to the vendor's. In the model that reference is a backend of
kind reference in the vendor's package (impl id ``reference.torch``, as the plugin's), named
``<vendor>_reference`` so that it never meets the plugin's reference backend.

Such an op is a function op, called with ``vllm_fl.dispatch.call_op``: a vLLM layer or function
is replaced by classes and patches the plugin generates from its own ops.yaml. It has a reference
impl, the vendor's impl and tests: the dispatch has a reference to fall back to, and the parity
tests compare the vendor's impl with it. Its name is none of the plugin's ops.
"""

from __future__ import annotations

import dataclasses

from .. import model as m
from .ops import read_op
from .reader import Reader
from ..yamlnodes import Entry, Map

#: how ``impls`` of an op of vendor.yaml names the package's reference backend
REFERENCE = "reference"
EXPECTED = "a mapping of op name -> definition, in the format of the plugin's ops.yaml"


def package_reference(plugin: m.Manifest, vendor: m.Backend, line: int) -> m.Backend:
    """The reference backend of the package's own ops: the plugin's (kind, impl id, priority),
    its functions in the vendor's package."""
    assert plugin.reference is not None  # the plugin's ops.yaml has one
    return dataclasses.replace(
        plugin.reference, name=f"{vendor.name}_{REFERENCE}", package=vendor.package, line=line
    )


def read_own_ops(
    r: Reader, entry: Entry, vendor: m.Backend, reference: m.Backend, plugin: m.Manifest
) -> tuple[m.Op, ...]:
    """The ops of ``ops:``, in file order, each checked to be a new function op with a
    reference impl, an impl of ``vendor`` and tests."""
    table = r.map(entry.value, "ops", EXPECTED)
    if not table.entries:
        raise r.error(entry.key_line, "ops is empty", "at least one op, or no 'ops' key")
    plugin_ops = {op.name: op for op in plugin.ops}
    # the names this file's impls use: ``reference`` and the vendor's
    backends = {REFERENCE: dataclasses.replace(reference, name=REFERENCE), vendor.name: vendor}
    ops = []
    for item in table.entries.values():
        other = plugin_ops.get(item.key)
        if other is not None:
            raise r.error(
                item.key_line,
                f"op {item.key!r} is an op of the plugin ({plugin.file}:{other.line})",
                "a name of your own for a new op (to implement the plugin's op, name it under "
                "impls)",
            )
        op = read_op(r, item, backends, dict(plugin.tolerances))
        _check(r, item, op, vendor)
        impls = tuple(
            dataclasses.replace(impl, backend=reference.name) if impl.backend == REFERENCE else impl
            for impl in op.impls
        )
        ops.append(dataclasses.replace(op, impls=impls, declared_in=r.file))
    return tuple(ops)


def _check(r: Reader, item: Entry, op: m.Op, vendor: m.Backend) -> None:
    what = f"op {op.name!r}"
    node = item.value
    assert isinstance(node, Map)  # read_op read it as one
    targets = (("layer", op.layer), ("function", op.function), ("collective", op.collective))
    for key, target in targets:
        if target is not None:
            path = target if isinstance(target, str) else target.path
            raise r.error(
                node.entries[key].key_line,
                f"{what} replaces vLLM's {path}, which only an op of the plugin's ops.yaml may",
                f"no '{key}': an op of a vendor package is a function op, called with "
                f"vllm_fl.dispatch.call_op({op.name!r}, ...)",
            )
    impls_line = node.entries["impls"].key_line
    for backend, where in ((REFERENCE, "the package's PyTorch reference"), (vendor.name, "yours")):
        if op.impl(backend) is None:
            raise r.error(
                impls_line,
                f"impls of {what} has no {backend!r} impl",
                f"{backend}: module.function under {vendor.path}/impl/ ({where})",
            )
    if op.tests is None:
        raise r.error(
            item.key_line,
            f"{what} has no tests",
            "tests: {dtypes: [...], cases: [...]} (its parity tests compare the "
            f"{vendor.name} impl with the reference on them)",
        )

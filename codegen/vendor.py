"""``python -m codegen vendor NAME --ops OP[,OP...]``: scaffold a vendor backend for the ops it
implements and add it to ops.yaml.

The manifest is edited as text (never re-dumped), so its comments and order survive: the
backend entry goes after the last backend, and ``NAME: module.function`` after the last impl of
every op asked for (the module and function names of the op's reference impl, or of its first
impl where the reference has none). Then the whole tree is regenerated in memory from the edited
manifest and written at once.

The backend's availability lives in ops.yaml only (``requires``, ``device``): the generated
``register_ops.py`` builds its probe from them, and the scaffolded package ``__init__.py`` holds
no second copy.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Sequence

from . import model as m
from .errors import CodegenError
from .files import FileManager
from .generate import build, manifest_label
from .manifest import is_identifier, load_manifest
from .render import render
from .sources import read_text
from .yamlnodes import Map, load

#: where vendor packages go when ops.yaml has none yet (else next to the first vendor's package)
VENDOR_ROOT = "vllm_fl.backends"
#: how the command line names the list of ops (``make vendor ... OPS=a,b``)
OPS_LABEL = "OPS"


def stub_impl(manifest: m.Manifest, op: m.Op) -> m.Impl | None:
    """The impl whose ``module.function`` a new vendor's stub for ``op`` takes: the reference's,
    else the op's first impl; None when the op has no impl at all."""
    return manifest.reference_impl(op) or (op.impls[0] if op.impls else None)


def pickable_ops(manifest: m.Manifest) -> list[str]:
    """The ops a new vendor may implement, in manifest order."""
    return [op.name for op in manifest.ops if stub_impl(manifest, op) is not None]


def usage(manifest: m.Manifest) -> str:
    """What to type, with every op the command can scaffold (printed when no op was asked for)."""
    ops = pickable_ops(manifest)
    listed = textwrap.fill(", ".join(ops), width=96, initial_indent="  ", subsequent_indent="  ")
    example = ",".join(ops[:2])
    return (
        "usage: make vendor NAME=<vendor> OPS=<op>[,<op>...]\n"
        "       (python -m codegen vendor NAME --ops OP[,OP...])\n"
        "Scaffolds backend NAME with impl stubs for the ops listed, which may be any of "
        f"{manifest.file}'s:\n{listed}\n"
        f"e.g. make vendor NAME=metax OPS={example}"
    )


def parse_ops(raw: str, manifest: m.Manifest) -> list[str]:
    """``"rms_norm, silu_and_mul"`` -> the op names, checked against the manifest."""
    allowed = pickable_ops(manifest)
    expected = "a comma-separated list of ops of " + manifest.file + ": " + ", ".join(allowed)
    names = [part.strip() for part in raw.split(",")]
    seen: list[str] = []
    for name in names:
        if not name:
            raise CodegenError(OPS_LABEL, None, f"{raw!r} has an empty op name", expected)
        if name not in allowed:
            raise CodegenError(OPS_LABEL, None, f"unknown op {name!r}", expected)
        if name in seen:
            raise CodegenError(OPS_LABEL, None, f"op {name!r} is listed twice", expected)
        seen.append(name)
    return seen


class VendorUsage(Exception):
    """The command was not given what it needs (a name, the ops): ``str()`` is the usage."""


def scaffold_vendor(
    name: str | None, ops: str | None, manifest_path: Path, root: Path
) -> FileManager:
    """Every file of the tree once vendor ``name`` implements ``ops`` (comma-separated op names).

    Raises ``VendorUsage`` when the name or the ops are missing (a vendor implements the ops it
    chooses, never all of them by default), ``CodegenError`` for anything invalid."""
    label = manifest_label(manifest_path, root)
    text = read_text(manifest_path, label)
    manifest = load_manifest(text, label)
    if not name or not ops or not ops.strip():
        raise VendorUsage(usage(manifest))
    if not is_identifier(name) or name != name.lower():
        raise CodegenError(
            label, None, f"vendor name {name!r} is not a lower-case identifier", "a name like metax"
        )
    for backend in manifest.backends:
        if backend.kind == "vendor" and backend.name == name == backend.vendor:
            return _add_ops(manifest, text, backend, ops, label, root)
        if backend.name == name or backend.vendor == name:
            raise CodegenError(
                label,
                backend.line,
                f"backend {name!r} already exists and is not vendor {name!r}",
                "a vendor name not in ops.yaml, or a vendor of ops.yaml to add ops to",
            )
    vendors = [b for b in manifest.backends if b.kind == "vendor"]
    parent = vendors[0].package.rsplit(".", 1)[0] if vendors else VENDOR_ROOT
    package = f"{parent}.{name}"
    folder = root / package.replace(".", "/")
    if folder.exists():
        raise CodegenError(
            str(folder.relative_to(root)),
            None,
            "the vendor folder exists",
            "no folder for a new vendor",
        )
    wanted = parse_ops(ops, manifest)

    chosen = [op for op in manifest.ops if op.name in wanted]
    new_text = _insert(text, manifest, chosen, name, package, label)
    new_manifest = load_manifest(new_text, label)
    files = build(new_manifest, root)
    files.add(label, new_text, owned=False)  # the user's manifest, edited in place
    base = package.replace(".", "/")
    files.override(f"{base}/__init__.py", render("new_backend/backend_init.py.j2", name=name))
    files.override(f"{base}/impl/__init__.py", render("new_backend/impl_init.py.j2", name=name))
    return files


def _add_ops(
    manifest: m.Manifest, text: str, backend: m.Backend, ops: str, label: str, root: Path
) -> FileManager:
    """Vendor ``backend`` exists: add the ops it does not implement yet (stubs and all)."""
    wanted = parse_ops(ops, manifest)
    missing = [
        op.name for op in manifest.ops if op.name in wanted and op.impl(backend.name) is None
    ]
    for name in wanted:
        if name not in missing:
            raise CodegenError(
                OPS_LABEL,
                None,
                f"vendor {backend.name!r} implements {name!r} already",
                "ops it does not implement yet: "
                + ", ".join(
                    n
                    for n in pickable_ops(manifest)
                    if manifest_op(manifest, n).impl(backend.name) is None
                ),
            )
    chosen = [op for op in manifest.ops if op.name in missing]
    new_text = _insert(text, manifest, chosen, backend.name, None, label)
    files = build(load_manifest(new_text, label), root)
    files.add(label, new_text, owned=False)
    return files


def manifest_op(manifest: m.Manifest, name: str) -> m.Op:
    return next(op for op in manifest.ops if op.name == name)


def _insert(
    text: str,
    manifest: m.Manifest,
    ops: Sequence[m.Op],
    name: str,
    package: str | None,
    label: str,
) -> str:
    """``text`` with backend ``name`` (unless ``package`` is None: it exists) and its impl of
    each op of ``ops`` inserted."""
    root = load(text, label)
    assert isinstance(root, Map)
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    inserts: list[tuple[int, str]] = []  # (after 1-based line, text)

    backends = root.entries["backends"].value
    assert isinstance(backends, Map)
    if backends.flow:
        raise CodegenError(
            label,
            backends.line,
            "backends is a flow mapping",
            "block style to insert a backend into",
        )
    if package is not None:
        entry = render("new_backend/manifest_backend.yaml.j2", name=name, package=package)
        indent = " " * backends.column
        entry = "".join(
            indent + line[2:] if line.strip() else line for line in entry.splitlines(keepends=True)
        )
        inserts.append((backends.end_line, entry))

    ops_node = root.entries["ops"].value
    assert isinstance(ops_node, Map)
    for op in ops:
        impl = stub_impl(manifest, op)
        assert impl is not None  # parse_ops allows only such ops
        op_node = ops_node.entries[op.name].value
        assert isinstance(op_node, Map)
        impls = op_node.entries["impls"].value
        if not isinstance(impls, Map) or impls.flow:
            raise CodegenError(
                label,
                impls.line,
                f"impls of op {op.name!r} is a flow mapping",
                "block style to insert an impl into",
            )
        inserts.append((impls.end_line, f"{' ' * impls.column}{name}: {impl.ref}\n"))

    for after, chunk in sorted(inserts, key=lambda item: item[0], reverse=True):
        lines.insert(after, chunk)
    return "".join(lines)

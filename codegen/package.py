"""Out-of-tree vendor packages: a backend shipped as its own pip package, generated like the
built-in ones without touching the plugin.

The package's manifest, ``vendor.yaml``, holds its one vendor backend (the keys of an ops.yaml
backend) and its impls per op, naming ops of the plugin's ops.yaml; the op signatures, the
reference impls and the test cases come from the plugin. Its optional ``ops:`` declares ops of
the package's own, in ops.yaml's format, each with a reference impl in the package
(``manifest.own_ops``), which the package registers and tests the vendor's impl against.
``vllm-fl generate`` in the package renders its ``register_ops.py`` (with the ``torch.library``
wrappers where opaque), its parity tests under ``tests/generated`` and stubs for missing impls;
``vllm-fl vendor NAME --ops ... --out DIR`` scaffolds the package (pyproject with the
``vllm_fl.plugin`` entry point, README, manifest) or adds ops to the one in DIR.
"""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

from . import layout, names
from . import model as m
from .backend_checks import check_probes
from .dest import parity, register_ops
from .errors import CodegenError
from .files import FileManager
from .impls import check_and_scaffold
from .manifest import is_identifier, project_manifest
from .manifest.backends import read_backends
from .manifest.impls import read_impl
from .manifest.own_ops import package_reference, read_own_ops
from .manifest.reader import Reader
from .render import generated_from, render
from .sources import read_text
from .vendor import VendorUsage, parse_ops, stub_impl
from .yamlnodes import Map, load

#: the manifest of an out-of-tree vendor package, at its root
MANIFEST = "vendor.yaml"
#: what regenerates such a package
COMMAND = "vllm-fl generate"
KEYS = ("backends", "impls", "ops")
EXPECTED = (
    "a mapping with backends (one vendor backend), impls (op -> module.function) and optionally "
    "ops (ops of your own)"
)
#: top-level packages a vendor package may not be (the plugin's and generic names)
FORBIDDEN = ("vllm_fl", "vllm", "codegen", "tests", "torch")


def is_package(root: Path) -> bool:
    """Whether ``root`` is an out-of-tree vendor package (its manifest, no ops.yaml)."""
    return (root / MANIFEST).is_file() and not (root / "ops.yaml").is_file()


def package_name(vendor: str) -> str:
    return f"vllm_fl_{vendor}"


def load_package_manifest(text: str, plugin: m.Manifest, file: str = MANIFEST) -> m.Manifest:
    """The package's manifest as a model: the plugin's reference backend and the vendor's, the
    plugin's ops the vendor implements (in the plugin's order), each with the reference impl and
    the vendor's; then the ops the package declares itself (``ops:``, in file order), each with
    the package's reference impl and the vendor's, and the package's reference backend."""
    r = Reader(file)
    root = load(text, file)
    if root is None:
        raise r.error(1, "the manifest is empty", EXPECTED)
    top = r.fields(root, "the manifest", EXPECTED, KEYS)
    backends_entry = top.require("backends", "a mapping with one vendor backend")
    impls_entry = top.require("impls", "a mapping of op -> module.function")
    ops_entry = top.pop("ops")
    top.done()
    backends = read_backends(r, backends_entry)
    if len(backends) != 1 or backends[0].kind != "vendor":
        raise r.error(
            backends_entry.key_line,
            f"backends declares {', '.join(f'{b.name} ({b.kind})' for b in backends)}",
            "exactly one backend, of kind vendor",
        )
    backend = backends[0]
    reference = plugin.reference
    assert reference is not None  # the plugin's ops.yaml has one
    for other in plugin.backends:
        if other.impl_id == backend.impl_id or other.name == backend.name:
            raise r.error(
                backend.line,
                f"backend {backend.name!r} (impl id {backend.impl_id!r}) is a backend of the "
                "plugin itself",
                "a vendor name of your own, none of " + ", ".join(b.name for b in plugin.backends),
            )
    own_reference: m.Backend | None = None
    own_ops: tuple[m.Op, ...] = ()
    if ops_entry is not None:
        own_reference = package_reference(plugin, backend, ops_entry.key_line)
        own_ops = read_own_ops(r, ops_entry, backend, own_reference, plugin)
    own_by_name = {op.name: op for op in own_ops}
    ops_by_name = {op.name: op for op in plugin.ops}
    allowed = [op.name for op in plugin.ops if plugin.reference_impl(op) is not None]
    table = r.map(impls_entry.value, "impls", "a mapping of op -> module.function")
    if not table.entries:
        raise r.error(impls_entry.key_line, "impls is empty", "at least one op of the plugin")
    chosen: dict[str, m.Impl] = {}
    for item in table.entries.values():
        name = r.key_ident(item, "op in impls")
        if name in own_by_name:
            raise r.error(
                item.key_line,
                f"impls names {name!r}, an op this file declares under ops (line "
                f"{own_by_name[name].line})",
                f"the impls of {name!r} in its entry under ops (impls names the plugin's ops)",
            )
        if name not in allowed:
            raise r.error(
                item.key_line,
                f"impls names {name!r}, which is not an op of the plugin with a reference impl",
                "one of " + ", ".join(allowed),
            )
        op = ops_by_name[name]
        chosen[name] = read_impl(r, item, backend.name, f"op {name!r}", op.inplace)
    ops = []
    for op in plugin.ops:
        impl = chosen.get(op.name)
        if impl is not None:
            ref_impl = plugin.reference_impl(op)
            assert ref_impl is not None
            ops.append(dataclasses.replace(op, impls=(ref_impl, impl)))
    backends = (reference, backend) + ((own_reference,) if own_reference else ())
    manifest = m.Manifest(file, backends, plugin.tolerances, tuple(ops) + own_ops)
    names.check(manifest)
    return manifest


def _vendor(manifest: m.Manifest) -> m.Backend:
    return next(b for b in manifest.backends if b.kind == "vendor")


def _check_layout(manifest: m.Manifest, root: Path, pending: set[str]) -> None:
    """The backend's package is a package of the folder, never the plugin's nor a generic one."""
    backend = _vendor(manifest)
    top = backend.package.split(".")[0]
    if top in FORBIDDEN:
        raise CodegenError(
            manifest.file,
            backend.line,
            f"package {backend.package!r} of backend {backend.name!r} lies in {top!r}",
            f"a package of your own, like {package_name(backend.vendor or backend.name)}",
        )
    init = f"{backend.path}/__init__.py"
    if init not in pending and not (root / init).is_file():
        known = sorted(
            p.parent.name for p in root.glob("*/__init__.py") if p.parent.name != "tests"
        )
        raise CodegenError(
            manifest.file,
            backend.line,
            f"package {backend.package!r} of backend {backend.name!r} is not a package of "
            f"{root} (no {backend.path}/__init__.py)",
            "one of its packages: " + (", ".join(known) or "none found"),
        )


def build_package(
    root: Path, text: str | None = None, pending: set[str] = frozenset()
) -> FileManager:
    """Every file the package at ``root`` generates from its manifest and the plugin's ops.yaml
    (``text``: the manifest's content and ``pending`` the files to be written with the result,
    when scaffolding)."""
    if text is None:
        text = read_text(root / MANIFEST, MANIFEST)
    manifest = load_package_manifest(text, project_manifest())
    _check_layout(manifest, root, pending)
    backend = _vendor(manifest)
    files = FileManager(root, may_own=layout.may_own)
    if f"{backend.path}/__init__.py" not in pending:
        check_probes(manifest, root, only=backend.name)
    with generated_from(MANIFEST, ", the plugin's ops.yaml", COMMAND):
        own = {b.name for b in manifest.backends if b.package == backend.package}
        for path, body in check_and_scaffold(manifest, root, only=own).items():
            files.add(path, body, owned=False)  # stubs: the vendor's from now on
        for path, body in register_ops.emit(manifest, backend).items():
            files.add(path, body)
        for path, body in parity.emit(manifest).items():
            files.add(path, body)
    return files


def usage(plugin: m.Manifest) -> str:
    ops = [op.name for op in plugin.ops if plugin.reference_impl(op) is not None]
    listed = textwrap.fill(", ".join(ops), width=96, initial_indent="  ", subsequent_indent="  ")
    return (
        "usage: vllm-fl vendor NAME --ops OP[,OP...] --out DIR\n"
        "Scaffolds the vendor package DIR (or adds ops to it) with impl stubs for the ops "
        f"listed, which may be any of the plugin's:\n{listed}\n"
        f"e.g. vllm-fl vendor mychip --ops {','.join(ops[:2])} --out vllm-fl-mychip"
    )


def scaffold_package(name: str | None, ops: str | None, out: Path) -> FileManager:
    """The files of package ``out`` once vendor ``name`` implements ``ops`` (comma-separated):
    a new package, or the one in ``out`` with the ops it does not have yet added."""
    plugin = project_manifest()
    if not name or not ops or not ops.strip():
        raise VendorUsage(usage(plugin))
    if not is_identifier(name) or name != name.lower():
        raise CodegenError(
            "NAME",
            None,
            f"vendor name {name!r} is not a lower-case identifier",
            "a name like metax",
        )
    wanted = parse_ops(ops, plugin)
    by_name = {op.name: op for op in plugin.ops}
    lines = []
    for op_name in wanted:
        impl = stub_impl(plugin, by_name[op_name])
        assert impl is not None  # parse_ops allows only such ops
        lines.append(f"  {op_name}: {impl.ref}\n")
    if (out / MANIFEST).is_file():
        return _add_ops(name, wanted, lines, out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise CodegenError(
            str(out),
            None,
            f"the folder exists and is not a vendor package (no {MANIFEST})",
            "a new or empty folder, or a vendor package to add ops to",
        )
    pkg = package_name(name)
    context = {"name": name, "package": pkg, "distribution": pkg.replace("_", "-")}
    manifest_text = render("vendor_package/vendor.yaml.j2", **context) + "".join(lines)
    scaffold = {
        f"{pkg}/__init__.py": render("vendor_package/package_init.py.j2", **context),
        f"{pkg}/impl/__init__.py": render("new_backend/impl_init.py.j2", **context),
        "pyproject.toml": render("vendor_package/pyproject.toml.j2", **context),
        "README.md": render("vendor_package/README.md.j2", **context),
    }
    files = build_package(out, manifest_text, pending=set(scaffold))
    for path, text in scaffold.items():
        if path in files:  # the generator's default package inits: the scaffold's instead
            files.override(path, text)
        else:
            files.add(path, text, owned=False)
    files.add(MANIFEST, manifest_text, owned=False)
    return files


def _add_ops(name: str, wanted: list[str], lines: list[str], out: Path) -> FileManager:
    """Add ``wanted`` to the impls of the package in ``out`` (its manifest edited as text, so its
    comments survive), then regenerate it."""
    text = read_text(out / MANIFEST, MANIFEST)
    current = load_package_manifest(text, project_manifest())
    backend = _vendor(current)
    if name != backend.vendor:
        raise CodegenError(
            MANIFEST,
            backend.line,
            f"the package in {out} is vendor {backend.vendor!r}, not {name!r}",
            f"vllm-fl vendor {backend.vendor} --ops ... --out {out}",
        )
    have = {op.name for op in current.ops}
    for op_name in wanted:
        if op_name in have:
            raise CodegenError(
                "OPS", None, f"vendor {name!r} implements {op_name!r} already", "ops it has not"
            )
    node = load(text, MANIFEST)
    assert isinstance(node, Map)
    impls = node.entries["impls"].value
    if not isinstance(impls, Map) or impls.flow:
        raise CodegenError(
            MANIFEST, impls.line, "impls is a flow mapping", "block style to insert an impl into"
        )
    indent = " " * impls.column
    body = text.splitlines(keepends=True)
    if body and not body[-1].endswith("\n"):
        body[-1] += "\n"
    body[impls.end_line : impls.end_line] = [indent + line.lstrip() for line in lines]
    new_text = "".join(body)
    files = build_package(out, new_text)
    files.add(MANIFEST, new_text, owned=False)
    return files

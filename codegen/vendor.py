"""``python -m codegen vendor NAME``: scaffold a vendor backend and add it to ops.yaml.

The manifest is edited as text (never re-dumped), so its comments and order survive: the
backend entry goes after the last backend, and ``NAME: module.function`` after the last impl of
every op the reference backend implements (same module and function names as the reference).
Then the whole tree is regenerated in memory from the edited manifest and written at once.
"""

from __future__ import annotations

from pathlib import Path

from codegen import model as m
from codegen.errors import CodegenError
from codegen.files import FileManager
from codegen.generate import build, manifest_label
from codegen.manifest import is_identifier, load_manifest
from codegen.render import render
from codegen.sources import read_text
from codegen.yamlnodes import Map, load

#: where vendor packages go when ops.yaml has none yet (else next to the first vendor's package)
VENDOR_ROOT = "vllm_fl.dispatch.backends.vendor"


def scaffold_vendor(name: str, manifest_path: Path, root: Path) -> FileManager:
    label = manifest_label(manifest_path, root)
    text = read_text(manifest_path, label)
    manifest = load_manifest(text, label)
    if not is_identifier(name) or name != name.lower():
        raise CodegenError(
            label, None, f"vendor name {name!r} is not a lower-case identifier", "a name like metax"
        )
    for backend in manifest.backends:
        if backend.name == name or backend.vendor == name:
            raise CodegenError(
                label,
                backend.line,
                f"backend {name!r} already exists",
                "a vendor name not in ops.yaml",
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

    new_text = _insert(text, manifest, name, package, label)
    new_manifest = load_manifest(new_text, label)
    files = build(new_manifest, root)
    files.add(label, new_text, owned=False)  # the user's manifest, edited in place
    base = package.replace(".", "/")
    files.override(f"{base}/__init__.py", render("vendor/backend_init.py.j2", name=name))
    files.override(f"{base}/impl/__init__.py", render("vendor/impl_init.py.j2", name=name))
    return files


def _insert(text: str, manifest: m.Manifest, name: str, package: str, label: str) -> str:
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
    entry = render("vendor/manifest_backend.yaml.j2", name=name, package=package)
    indent = " " * backends.column
    entry = "".join(
        indent + line[2:] if line.strip() else line for line in entry.splitlines(keepends=True)
    )
    inserts.append((backends.end_line, entry))

    ops = root.entries["ops"].value
    assert isinstance(ops, Map)
    for op in manifest.ops:
        ref = manifest.reference_impl(op)
        if ref is None:
            continue
        op_node = ops.entries[op.name].value
        assert isinstance(op_node, Map)
        impls = op_node.entries["impls"].value
        if not isinstance(impls, Map) or impls.flow:
            raise CodegenError(
                label,
                impls.line,
                f"impls of op {op.name!r} is a flow mapping",
                "block style to insert an impl into",
            )
        inserts.append((impls.end_line, f"{' ' * impls.column}{name}: {ref.ref}\n"))

    for after, chunk in sorted(inserts, key=lambda item: item[0], reverse=True):
        lines.insert(after, chunk)
    return "".join(lines)

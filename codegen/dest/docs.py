"""``docs/operators.md`` and the README's operator table (the region between its markers)."""

from __future__ import annotations

from pathlib import Path

from .. import model as m
from ..render import render, render_file

PATH = "docs/operators.md"
README = "README.md"
TABLE_BEGIN = "<!-- BEGIN GENERATED: operator-table -->"
TABLE_END = "<!-- END GENERATED: operator-table -->"


def emit(manifest: m.Manifest, root: Path) -> dict[str, str]:
    table = render("operator_table.md.j2", ops=manifest.ops, backends=manifest.backends)
    out = {
        PATH: render_file(
            "operators.md.j2",
            PATH,
            ops=manifest.ops,
            backends=manifest.backends,
            unwrapped={
                op.name
                for op in manifest.ops
                if not op.opaque_ok and any(manifest.backend(i.backend).opaque for i in op.impls)
            },
            backends_by_name={b.name: b for b in manifest.backends},
            table=table,
        ),
    }
    readme = root / README
    if readme.exists():
        text = readme.read_text()
        begin, end = text.find(TABLE_BEGIN), text.find(TABLE_END)
        if 0 <= begin < end:
            region = (
                f"{TABLE_BEGIN}\n<!-- generated from ops.yaml by `make codegen`; do not edit -->\n"
                f"{table}\nPer-op details: [docs/operators.md](docs/operators.md).\n"
            )
            out[README] = text[:begin] + region + text[end:]
    return out

"""``docs/operators.md`` and the README's operator table (the region between its markers)."""

from __future__ import annotations

from pathlib import Path

from .. import model as m
from ..render import render, render_file
from . import collective_tests, parity

PATH = "docs/operators.md"
README = "README.md"
TABLE_BEGIN = "<!-- BEGIN GENERATED: operator-table -->"
TABLE_END = "<!-- END GENERATED: operator-table -->"


def _test_modules(manifest: m.Manifest) -> dict[str, str]:
    """op -> the generated module holding its tests."""
    out = {op.name: parity.module_path(op) for op in parity.tested(manifest)}
    out.update({op.name: collective_tests.PATH for op in collective_tests.tested(manifest)})
    return out


def _checked_with(manifest: m.Manifest) -> dict[str, str]:
    """op -> the op whose tests check it (recv: each send's is received by it)."""
    senders = [op.name for op in collective_tests.tested(manifest) if op.collective == "send"]
    if not senders:
        return {}
    return {op.name: senders[0] for op in manifest.ops if op.collective == "recv"}


def emit(manifest: m.Manifest, root: Path) -> dict[str, str]:
    checked_with = _checked_with(manifest)
    table = render(
        "operator_table.md.j2",
        ops=manifest.ops,
        backends=manifest.backends,
        checked_with=checked_with,
    )
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
            test_modules=_test_modules(manifest),
            checked_with=checked_with,
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

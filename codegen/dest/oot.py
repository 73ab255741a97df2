"""``vllm_fl/ops``: one module of out-of-tree ``CustomOp`` classes per vLLM module that defines a
class an op replaces (its layer or one of the layer's ``subclasses``), and the package
``__init__`` listing them (and the function ops)."""

from __future__ import annotations

from dataclasses import dataclass

from .. import model as m
from ..render import render_file

DIR = "vllm_fl/ops"
INIT = f"{DIR}/__init__.py"


@dataclass(frozen=True)
class OotClass:
    """One generated class: it subclasses the vLLM class ``vllm`` and dispatches ``op``;
    ``subclass_of`` is the op's layer where ``vllm`` is one of its subclasses."""

    vllm: m.Layer
    op: m.Op
    subclass_of: m.Layer | None


def module_path(layer: m.Layer) -> str:
    """The out-of-tree module holding the class that replaces ``layer``."""
    return f"{DIR}/{layer.short_module}.py"


def oot_classes(manifest: m.Manifest) -> list[OotClass]:
    """Every generated class, in manifest order (an op's layer, then its subclasses)."""
    out = []
    for op in manifest.ops:
        for cls in op.classes:
            out.append(OotClass(cls, op, op.layer if isinstance(cls, m.Subclass) else None))
    return out


def emit(manifest: m.Manifest) -> dict[str, str]:
    classes = oot_classes(manifest)
    groups: dict[str, list[OotClass]] = {}
    for entry in classes:
        groups.setdefault(module_path(entry.vllm), []).append(entry)
    layered = [entry for entry in classes if entry.subclass_of is None]
    subclasses = [entry for entry in classes if entry.subclass_of is not None]
    functions = [op for op in manifest.ops if op.function is not None]
    out = {
        INIT: render_file(
            "oot_init.py.j2",
            INIT,
            layers=layered,
            subclasses=subclasses,
            classes=classes,
            functions=functions,
        )
    }
    for path, entries in groups.items():
        out[path] = render_file(
            "oot_module.py.j2",
            path,
            module=entries[0].vllm.module,
            classes=entries,
            required=[entry for entry in entries if not entry.vllm.optional],
            optional=[entry for entry in entries if entry.vllm.optional],
        )
    return out

"""``vllm_fl/ops``: one module of out-of-tree ``CustomOp`` classes per vLLM layer module, and
the package ``__init__`` listing them (and the function ops)."""

from __future__ import annotations

from .. import model as m
from ..render import render_file

DIR = "vllm_fl/ops"
INIT = f"{DIR}/__init__.py"


def module_path(layer: m.Layer) -> str:
    """The out-of-tree module holding the class that replaces ``layer``."""
    return f"{DIR}/{layer.short_module}.py"


def emit(manifest: m.Manifest) -> dict[str, str]:
    layered = [op for op in manifest.ops if op.layer is not None]
    groups: dict[str, list[m.Op]] = {}
    for op in layered:
        assert op.layer is not None
        groups.setdefault(module_path(op.layer), []).append(op)
    functions = [op for op in manifest.ops if op.function is not None]
    out = {INIT: render_file("oot_init.py.j2", INIT, ops=layered, functions=functions)}
    for path, ops in groups.items():
        assert ops[0].layer is not None
        out[path] = render_file("oot_module.py.j2", path, module=ops[0].layer.module, ops=ops)
    return out

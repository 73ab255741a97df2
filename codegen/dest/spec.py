"""``vllm_fl/dispatch/ops.py``: ``FLBackendBase``, one abstract method per op."""

from __future__ import annotations

from codegen import model as m
from codegen.render import render_file

PATH = "vllm_fl/dispatch/ops.py"


def emit(manifest: m.Manifest) -> dict[str, str]:
    return {PATH: render_file("ops.py.j2", PATH, ops=manifest.ops)}

"""``vllm_fl/dispatch/spec.py``: the backend contract ``FLBackendBase``, one abstract method per
op, and the ``<Op>Layer`` protocols of the layer attributes impls read."""

from __future__ import annotations

from .. import model as m
from ..render import render_file

PATH = "vllm_fl/dispatch/spec.py"


def emit(manifest: m.Manifest) -> dict[str, str]:
    return {PATH: render_file("spec.py.j2", PATH, ops=manifest.ops)}

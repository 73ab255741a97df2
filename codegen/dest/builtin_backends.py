"""``vllm_fl/dispatch/builtin_backends.py``: the built-in backend packages, in manifest order."""

from __future__ import annotations

from .. import model as m
from ..render import render_file

PATH = "vllm_fl/dispatch/builtin_backends.py"


def emit(manifest: m.Manifest) -> dict[str, str]:
    return {PATH: render_file("builtin_backends.py.j2", PATH, backends=manifest.backends)}

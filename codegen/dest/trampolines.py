"""``vllm_fl/dispatch/trampolines.py``: each op's dispatch trampolines as plain Python, the code
``vllm_fl.dispatch.runtime.trampoline`` installs for the op when its impls take the op's
parameters.

Per op, two factories over the cells ``_impl``, ``_traced``, ``_strict``, ``_fallback``: a plain
trampoline, and a split one that sends calls traced by torch.compile to ``_traced``. The
trampoline takes the parameters of the op's impls (``FLBackendBase``'s, the layer first as
``self``), so a call is bound to them before the ``try`` and a bad call raises ``TypeError``
itself, never blaming an impl.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import model as m
from ..render import render_file

PATH = "vllm_fl/dispatch/trampolines.py"
#: the name of the layer parameter, the convention of impls (``spec.py``)
LAYER = "self"


@dataclass(frozen=True)
class _TrampolineView:
    op: str
    #: the trampoline's parameter list, defaults as the manifest's literals
    params: str
    #: the arguments it passes on, all positional (every parameter is positional-or-keyword)
    call: str
    #: the same arguments as a tuple display, for the fallback
    args: str


def _view(op: m.Op) -> _TrampolineView:
    layer = [LAYER] if op.has_self else []
    names = layer + list(op.schema.arg_names)
    params = layer + [arg.python_plain() for arg in op.schema.arguments]
    args = "(" + ", ".join(names) + ("," if len(names) == 1 else "") + ")"
    return _TrampolineView(op.name, ", ".join(params), ", ".join(names), args)


def emit(manifest: m.Manifest) -> dict[str, str]:
    views = [_view(op) for op in manifest.ops]
    return {PATH: render_file("trampolines.py.j2", PATH, ops=views)}

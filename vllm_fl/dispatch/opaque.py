"""Runtime helpers of the generated register_ops.py of opaque backends (contract 5).

An opaque backend's kernels run as ``torch.library`` custom ops, so Dynamo and CUDA graphs see
one node instead of tracing into a kernel launcher. The generated code uses three helpers:

- :func:`attrs` builds the stand-in ``self`` an impl reads layer attributes from, out of the
  custom op's explicit arguments;
- :func:`flatten` turns an impl result into the ``list[Tensor]`` a custom op returns (custom ops
  cannot return None or unions: trailing Nones are dropped, the generated adapter restores them
  from the list's length);
- :func:`define` defines a custom op once per process, thread-safely.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Callable

import torch

_LOCK = threading.Lock()
_DEFINED: dict[str, object] = {}


def attrs(**values: object) -> SimpleNamespace:
    """The object an impl receives as ``self`` inside a custom op: the layer attributes it reads."""
    return SimpleNamespace(**values)


def flatten(result: torch.Tensor | tuple | list | None) -> list[torch.Tensor]:
    """``t`` -> ``[t]``; ``(a, b, None)`` -> ``[a, b]``; only trailing Nones may be dropped."""
    if result is None:
        return []
    if isinstance(result, torch.Tensor):
        return [result]
    items = list(result)
    while items and items[-1] is None:
        items.pop()
    if any(item is None for item in items):
        raise TypeError(
            f"an opaque kernel returned None before a tensor ({_shape(result)}); only trailing "
            "elements of a tuple return may be None"
        )
    return items


def _shape(result: object) -> str:
    return "(" + ", ".join("None" if r is None else type(r).__name__ for r in result) + ")"


def define(qualname: str, kernel: Callable, fake: Callable) -> None:
    """Define custom op ``qualname`` (``"vllm_fl::<backend>_<op>"``) unless already defined.

    ``kernel``'s annotations give the schema; ``fake`` (running the reference impl on fake
    tensors) gives shapes to Dynamo. Safe to call from several threads and registrations.
    """
    if qualname in _DEFINED:
        return
    with _LOCK:
        if qualname in _DEFINED:
            return
        op = torch.library.custom_op(qualname, kernel, mutates_args=())
        op.register_fake(fake)
        _DEFINED[qualname] = op


def defined() -> tuple[str, ...]:
    """The custom ops defined in this process so far (for tests and ``explain``)."""
    return tuple(_DEFINED)

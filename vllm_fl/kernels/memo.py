"""Values derived from a tensor (a cast copy, a shifted weight), remembered while it lives.

Per-layer constants such as the cos/sin halves of a rotary cache or Gemma's (1 + w) weight are
the same on every call; deriving them per call costs host time and extra kernels in eager mode.
A value is recomputed when the tensor is changed in place (its version counter moves), and
forgotten when the tensor is freed. (``weakref.WeakKeyDictionary`` cannot hold tensors: it
compares keys with ``==``, which on tensors is elementwise.)
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from typing import Any

import torch


class TensorMemo:
    """``get(tensor, key, make)``: ``make()`` once per tensor, version and key."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref, tuple, Any]] = {}

    def get(self, tensor: torch.Tensor, key: Hashable, make: Callable[[], Any]) -> Any:
        ident = id(tensor)
        stamp = (tensor._version, key)
        entry = self._entries.get(ident)
        if entry is not None and entry[0]() is tensor and entry[1] == stamp:
            return entry[2]
        value = make()
        self._entries[ident] = (weakref.ref(tensor, self._forget(ident)), stamp, value)
        return value

    def _forget(self, ident: int) -> Callable[[weakref.ref], None]:
        def forget(dead: weakref.ref) -> None:
            entry = self._entries.get(ident)
            if entry is not None and entry[0] is dead:
                del self._entries[ident]

        return forget

    def __len__(self) -> int:
        return len(self._entries)

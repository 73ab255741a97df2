"""``Check``: one op's entry of the generated ``vllm_fl.dispatch.checks.CHECKS``, as the verifier
reads it."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["Check"]


@dataclass(frozen=True)
class Check:
    """One op's entry of ``vllm_fl.dispatch.checks.CHECKS``."""

    args: tuple[str, ...]
    layer: bool
    mutates: tuple[str, ...]
    inplace: tuple[str, ...]
    dtype_from: tuple[str, ...]
    canonical: str | None
    tolerances: dict[str, tuple[float, float]]
    cache: tuple[str, ...] = ()
    slots: str | None = None
    bounds: tuple[str, ...] = ()

    def tolerance(self, dtype: str) -> tuple[float, float]:
        """The tolerance of ``dtype`` (float64, which ops.yaml does not list: float32's)."""
        return self.tolerances.get(dtype) or self.tolerances.get("float32") or (0.0, 0.0)

    def canonical_fn(self) -> Callable[..., Any] | None:
        if self.canonical is None:
            return None
        module, _, function = self.canonical.partition(":")
        return getattr(importlib.import_module(module), function)

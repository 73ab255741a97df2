"""How far a selected impl's result is from the reference's: the largest absolute and relative
error and the largest error over tolerance (``atol + rtol * |reference|``, the rule of
``torch.testing.assert_close`` the parity tests use). Integer tensors (indices, counts) must be
equal; non-finite values, shapes or dtypes that differ always exceed."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["Diff", "compare"]


@dataclass
class Diff:
    """The distance of one call's result from the reference's. ``ratio``: the largest error over
    its tolerance (above 1: the call exceeds); ``notes``: what no number says (a shape differs,
    a value is NaN)."""

    max_abs: float = 0.0
    max_rel: float = 0.0
    ratio: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def exceeded(self) -> bool:
        return self.ratio > 1.0 or bool(self.notes)

    def merge(self, other: Diff, where: str) -> None:
        self.max_abs = max(self.max_abs, other.max_abs)
        self.max_rel = max(self.max_rel, other.max_rel)
        self.ratio = max(self.ratio, other.ratio)
        self.notes.extend(f"{where}: {note}" for note in other.notes)


def _tensor_diff(actual: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float) -> Diff:
    if actual.shape != expected.shape:
        return Diff(
            math.inf,
            math.inf,
            math.inf,
            [f"shape {tuple(actual.shape)}, reference " f"{tuple(expected.shape)}"],
        )
    notes = []
    if actual.dtype != expected.dtype:
        notes.append(f"dtype {actual.dtype}, reference {expected.dtype}")
    if actual.numel() == 0:
        return Diff(notes=notes)
    if not expected.is_floating_point() and not actual.is_floating_point():
        atol = rtol = 0.0  # indices and counts: exactly
    a = actual.detach().to(torch.float64)
    e = expected.detach().to(torch.float64)
    finite = torch.isfinite(a) & torch.isfinite(e)
    same_special = (a == e) | (torch.isnan(a) & torch.isnan(e))
    if not bool(finite.all()):
        bad = ~finite & ~same_special
        if bool(bad.any()):
            notes.append(f"{int(bad.sum())} non-finite value(s) where the reference differs")
        if bool((torch.isnan(e)).any()):
            notes.append("the reference has NaN")
        a = torch.where(finite, a, torch.zeros_like(a))
        e = torch.where(finite, e, torch.zeros_like(e))
    err = (a - e).abs()
    mag = e.abs()
    max_abs = float(err.max())
    rel = torch.where(mag > 0, err / mag.clamp_min(1e-300), torch.where(err > 0, math.inf, 0.0))
    bound = atol + rtol * mag
    over = torch.where(
        bound > 0, err / bound.clamp_min(1e-300), torch.where(err > 0, math.inf, 0.0)
    )
    return Diff(max_abs, float(rel.max()), float(over.max()), notes)


def compare(actual: Any, expected: Any, atol: float, rtol: float) -> Diff:
    """The distance of ``actual`` from ``expected``: tensors, tuples of them (output by output),
    None or plain values (equal or not)."""
    if isinstance(expected, torch.Tensor) and isinstance(actual, torch.Tensor):
        return _tensor_diff(actual, expected, atol, rtol)
    if isinstance(expected, (tuple, list)) and isinstance(actual, (tuple, list)):
        if len(actual) != len(expected):
            return Diff(notes=[f"{len(actual)} results, reference {len(expected)}"])
        total = Diff()
        for index, (a, e) in enumerate(zip(actual, expected)):
            total.merge(compare(a, e, atol, rtol), f"output {index}")
        return total
    if isinstance(expected, torch.Tensor) or isinstance(actual, torch.Tensor):
        return Diff(notes=[f"{_kind(actual)}, reference {_kind(expected)}"])
    if actual != expected:
        return Diff(notes=[f"{actual!r}, reference {expected!r}"])
    return Diff()


def _kind(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"Tensor{tuple(value.shape)}"
    return type(value).__name__ if value is not None else "None"

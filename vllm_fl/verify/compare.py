"""How far a selected impl's result is from the truth, and whether that is more than rounding.

The truth is the reference impl computed in a wider dtype (float32 for a bfloat16 or float16
call, float64 for a float32 one: ``WIDER``). A call's floating-point output is over tolerance
when it fails both rules:

- **rounding rule**: per row (the output's first dimension, a token), the impl's largest error
  against the wide reference is more than ``K_REFERENCE`` times the largest error of the reference
  computed in the call's dtype, plus ``C_ROUNDING`` units of rounding of that dtype at the row's
  scale (its largest wide-reference magnitude): ``e_impl > K * e_ref + C * u * scale``;
- **parity rule**: some element's difference from the reference in the call's dtype is over the
  op's parity-test tolerance ``atol + rtol * |reference|`` (the rule of
  ``torch.testing.assert_close``), which covers kernels allowed a coarser arithmetic (TF32).

So a kernel is blamed only when its error is clearly larger than what computing in the call's
dtype costs the reference itself. Without a wide reference (an op whose reference cannot run in
the wider dtype) only the parity rule applies. Integer outputs must be equal; outputs of one byte
(FP8 values) follow the parity rule; a non-finite value in the result or the reference, and
shapes that differ, always exceed.

The numbers stay on the device: ``measure`` returns a small tensor (``STATS``) per call, read back
in one transfer for many calls (``resolve``), so verifying does not wait for the device per call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = [
    "C_ROUNDING",
    "Diff",
    "K_REFERENCE",
    "Measure",
    "STATS",
    "WIDER",
    "compare",
    "measure",
    "resolve",
    "unit_roundoff",
]

#: how many times the reference-in-dtype's own error an impl may err
K_REFERENCE = 4.0
#: units of rounding of the call's dtype, at a row's scale, an impl may err beyond that
C_ROUNDING = 4.0
#: the dtype the truth is computed in, per call dtype
WIDER = {
    torch.bfloat16: torch.float32,
    torch.float16: torch.float32,
    torch.float32: torch.float64,
}
#: the entries of a call's statistics tensor
STATS = ("max_abs", "magnitude", "ratio")


def unit_roundoff(dtype: torch.dtype) -> float:
    """Half the distance from 1 to the next number of ``dtype`` (2^-8 for bfloat16)."""
    return torch.finfo(dtype).eps / 2


@dataclass
class Diff:
    """The distance of one call's result from the truth. ``ratio``: the error over what the
    rules allow (above 1: the call exceeds); ``max_rel``: the largest error over the largest
    magnitude of the reference (a norm-wise relative error); ``notes``: what no number says (a
    shape differs, a value is NaN)."""

    max_abs: float = 0.0
    max_rel: float = 0.0
    ratio: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def exceeded(self) -> bool:
        return self.ratio > 1.0 or bool(self.notes)


@dataclass
class Measure:
    """One call's comparison before it is read back: ``stats`` (device, float64, ``STATS``
    entries; None when nothing was numeric) and the notes known without the device. ``flags``
    are device booleans whose note applies when true (an input the impl wrote into)."""

    stats: torch.Tensor | None
    notes: list[str] = field(default_factory=list)
    flags: list[tuple[torch.Tensor, str]] = field(default_factory=list)


#: divisors are kept above this, so that x / 0 reads as a huge ratio and 0 / 0 as 0
TINY = 1e-30


def _rows(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(t.shape[0], -1) if t.dim() >= 2 else t.reshape(1, -1)


def _tensor(
    actual: torch.Tensor,
    expected: torch.Tensor,
    wide: torch.Tensor | None,
    atol: float,
    rtol: float,
    unit: float,
) -> Measure:
    if actual.shape != expected.shape:
        return Measure(None, [f"shape {tuple(actual.shape)}, reference {tuple(expected.shape)}"])
    notes = []
    if actual.dtype != expected.dtype:
        notes.append(f"dtype {actual.dtype}, reference {expected.dtype}")
    if actual.numel() == 0:
        return Measure(None, notes)
    if not expected.is_floating_point() and not actual.is_floating_point():
        # indices and counts: exactly
        a, e = actual.to(torch.float64), expected.to(torch.float64)
        err = (a - e).abs_().amax()
        ratio = torch.where(err > 0, math.inf, 0.0)
        return Measure(torch.stack([err, e.abs_().amax(), ratio]), notes)
    if wide is not None and (actual.element_size() == 1 or wide.shape != actual.shape):
        wide = None  # FP8 values: the parity rule
    # as few device operations as the two rules need: verifying is paid per call
    work = torch.float64 if unit < 2**-12 or wide is None else torch.float32
    a = actual.detach().to(work)
    e = expected.detach().to(work)
    bound = e.abs().mul_(rtol).add_(atol).clamp_min_(TINY)
    parity = (a - e).abs_().div_(bound).amax()
    if wide is None:
        return Measure(torch.stack([(a - e).abs_().amax(), e.abs_().amax(), parity]), notes)
    w = wide.detach().to(work)
    e_impl = _rows((a - w).abs_()).amax(1)
    e_ref = _rows((e - w).abs_()).amax(1)
    scale = _rows(w.abs()).amax(1)
    allowed = torch.add(e_ref.mul_(K_REFERENCE), scale, alpha=C_ROUNDING * unit)
    rounding = e_impl.div(allowed.clamp_min_(TINY)).amax()
    ratio = torch.minimum(parity, rounding)
    return Measure(torch.stack([e_impl.amax(), scale.amax(), ratio]), notes)


def measure(
    actual: Any, expected: Any, wide: Any, atol: float, rtol: float, unit: float
) -> Measure:
    """Compare ``actual`` with ``expected`` (the reference in the call's dtype) and ``wide`` (the
    reference in the wider dtype, or None): tensors, tuples of them (output by output), None or
    plain values (equal or not). ``unit``: the unit roundoff of the call's dtype."""
    if isinstance(expected, torch.Tensor) and isinstance(actual, torch.Tensor):
        w = wide if isinstance(wide, torch.Tensor) else None
        return _tensor(actual, expected, w, atol, rtol, unit)
    if isinstance(expected, (tuple, list)) and isinstance(actual, (tuple, list)):
        if len(actual) != len(expected):
            return Measure(None, [f"{len(actual)} results, reference {len(expected)}"])
        wides = (
            wide
            if isinstance(wide, (tuple, list)) and len(wide) == len(expected)
            else [None] * len(expected)
        )
        parts = [measure(a, e, w, atol, rtol, unit) for a, e, w in zip(actual, expected, wides)]
        stats = [p.stats for p in parts if p.stats is not None]
        notes = [f"output {i}: {n}" for i, p in enumerate(parts) for n in p.notes]
        # an op's outputs need not share a device: their numbers are read back from one
        total = torch.stack([t.to(stats[0].device) for t in stats]).amax(0) if stats else None
        return Measure(total, notes)
    if isinstance(expected, torch.Tensor) or isinstance(actual, torch.Tensor):
        return Measure(None, [f"{_kind(actual)}, reference {_kind(expected)}"])
    if actual != expected:
        return Measure(None, [f"{actual!r}, reference {expected!r}"])
    return Measure(None)


def compare(
    actual: Any,
    expected: Any,
    atol: float,
    rtol: float,
    wide: Any = None,
    unit: float = 0.0,
) -> Diff:
    """``measure`` of one call, read back at once."""
    return resolve([measure(actual, expected, wide, atol, rtol, unit)])[0]


def resolve(measures: list[Measure]) -> list[Diff]:
    """The ``Diff`` of each measure, reading every device number back in one transfer per
    device."""
    # each measure's tensors in order (stats, then flags), read back device by device
    slots: dict[torch.device, list[tuple[int, int, torch.Tensor]]] = {}
    for index, m in enumerate(measures):
        tensors = ([m.stats.reshape(-1)] if m.stats is not None else []) + [
            f.reshape(1).to(torch.float64) for f, _ in m.flags
        ]
        for position, t in enumerate(tensors):
            slots.setdefault(t.device, []).append((index, position, t))
    parts: dict[tuple[int, int], list[float]] = {}
    for entries in slots.values():
        numbers = torch.cat([t for _, _, t in entries]).tolist()
        cursor = 0
        for index, position, t in entries:
            parts[(index, position)] = numbers[cursor : cursor + t.numel()]
            cursor += t.numel()
    diffs = []
    for index, m in enumerate(measures):
        notes = list(m.notes)
        diff = Diff(notes=notes)
        position = 0
        if m.stats is not None:
            max_abs, magnitude, ratio = parts[(index, 0)]
            if not all(math.isfinite(v) for v in (max_abs, magnitude)) or math.isnan(ratio):
                # NaN or infinity in the result or the reference reaches the maxima
                notes.append("non-finite values in the result or the reference")
                max_abs, ratio = math.inf, math.inf
            diff.max_abs, diff.ratio = max_abs, ratio
            diff.max_rel = (
                max_abs / magnitude if magnitude > 0 else (math.inf if max_abs > 0 else 0.0)
            )
            position = 1
        for offset, (_, note) in enumerate(m.flags):
            if parts[(index, position + offset)][0]:
                notes.append(note)
        diffs.append(diff)
    return diffs


def _kind(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"Tensor{tuple(value.shape)}"
    return type(value).__name__ if value is not None else "None"

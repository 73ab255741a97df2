"""What verification found in one process: one row per op x call site x shapes x dtype, and per
op how many calls were seen and verified. Rows travel as JSON (``to_json``/``rows_from_json``),
with infinities written as the string ``"inf"`` so the files stay standard JSON."""

from __future__ import annotations

import math
import threading
from dataclasses import asdict, dataclass, field
from typing import Any

from .compare import Diff

__all__ = ["Row", "Recorder", "row_key", "rows_from_json"]

MAX_NOTES = 5


@dataclass
class Row:
    """One op x call site x shapes x dtype: ``calls`` verified, ``exceeded`` of them over the
    tolerance (``atol``, ``rtol``), the largest absolute and relative errors, the largest error
    over its tolerance (``ratio``) and the first call that exceeded (``first_exceeded``: the op's
    call number and the engine step)."""

    op: str
    impl: str
    site: str
    shapes: str
    dtype: str
    atol: float
    rtol: float
    calls: int = 0
    exceeded: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    ratio: float = 0.0
    first_exceeded: dict | None = None
    notes: list[str] = field(default_factory=list)

    def add(self, diff: Diff, call: int, step: int) -> None:
        self.calls += 1
        self.max_abs = max(self.max_abs, diff.max_abs)
        self.max_rel = max(self.max_rel, diff.max_rel)
        self.ratio = max(self.ratio, diff.ratio)
        if diff.exceeded:
            self.exceeded += 1
            if self.first_exceeded is None:
                self.first_exceeded = {"call": call, "step": step, "max_abs": diff.max_abs}
        for note in diff.notes:
            if note not in self.notes and len(self.notes) < MAX_NOTES:
                self.notes.append(note)

    def merge(self, other: Row) -> None:
        """Add ``other``'s calls (the same key, another process)."""
        self.calls += other.calls
        self.exceeded += other.exceeded
        self.max_abs = max(self.max_abs, other.max_abs)
        self.max_rel = max(self.max_rel, other.max_rel)
        self.ratio = max(self.ratio, other.ratio)
        if self.first_exceeded is None:
            self.first_exceeded = other.first_exceeded
        for note in other.notes:
            if note not in self.notes and len(self.notes) < MAX_NOTES:
                self.notes.append(note)


def row_key(row: Row) -> tuple[str, ...]:
    return (row.op, row.impl, row.site, row.shapes, row.dtype)


def _out(value: Any) -> Any:
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    if isinstance(value, dict):
        return {k: _out(v) for k, v in value.items()}
    return value


def _in(value: Any) -> Any:
    if value == "inf":
        return math.inf
    if isinstance(value, dict):
        return {k: _in(v) for k, v in value.items()}
    return value


class Recorder:
    """The rows of one process, and per op the calls seen and verified (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.rows: dict[tuple[str, ...], Row] = {}
        #: op -> {"impl": selected impl id, "calls": calls seen, "verified": calls verified}
        self.ops: dict[str, dict[str, Any]] = {}

    def seen(self, op: str, impl: str) -> None:
        with self._lock:
            entry = self.ops.setdefault(op, {"impl": impl, "calls": 0, "verified": 0})
            entry["impl"] = impl
            entry["calls"] += 1

    def add(
        self,
        op: str,
        impl: str,
        site: str,
        shapes: str,
        dtype: str,
        tolerance: tuple[float, float],
        diff: Diff,
        call: int,
        step: int,
    ) -> None:
        key = (op, impl, site, shapes, dtype)
        with self._lock:
            row = self.rows.get(key)
            if row is None:
                row = self.rows[key] = Row(op, impl, site, shapes, dtype, *tolerance)
            row.add(diff, call, step)
            self.ops.setdefault(op, {"impl": impl, "calls": 0, "verified": 0})["verified"] += 1

    def to_json(self, **extra: Any) -> dict[str, Any]:
        with self._lock:
            rows = [{k: _out(v) for k, v in asdict(r).items()} for r in self.rows.values()]
            ops = {op: dict(entry) for op, entry in self.ops.items()}
        return {**extra, "ops": ops, "rows": rows}

    def clear(self) -> None:
        with self._lock:
            self.rows.clear()
            self.ops.clear()


def rows_from_json(data: dict[str, Any]) -> list[Row]:
    return [Row(**{k: _in(v) for k, v in row.items()}) for row in data.get("rows", [])]

"""What verification found in one process: one row per op x call site x shapes x dtype, and per
op how many calls were seen, verified and could not be verified. A verified call's numbers stay
on the device until ``flush`` reads the pending calls back in one transfer. Rows travel as JSON
(``to_json``/``rows_from_json``), with infinities written as the string ``"inf"`` so the files
stay standard JSON."""

from __future__ import annotations

import math
import threading
from dataclasses import asdict, dataclass, field
from typing import Any

from .compare import Diff, Measure, resolve

__all__ = ["CallKey", "Row", "Recorder", "row_key", "rows_from_json"]

MAX_NOTES = 5


@dataclass
class Row:
    """One op x call site x shapes x dtype: ``calls`` verified, ``exceeded`` of them over the
    tolerance (``vllm_fl.verify.compare``'s rules; ``atol``, ``rtol``: the parity tolerance),
    ``unverified`` calls that could not be verified (their reasons in ``notes``), the largest
    absolute and norm-wise relative errors, the largest error over what the rules allow
    (``ratio``) and the first call that exceeded (``first_exceeded``: the op's call number and the
    engine step)."""

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
    unverified: int = 0

    def not_verified(self, reason: str) -> None:
        self.unverified += 1
        self._note(f"not verified: {reason}")

    def _note(self, note: str) -> None:
        if note not in self.notes and len(self.notes) < MAX_NOTES:
            self.notes.append(note)

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
            self._note(note)

    def merge(self, other: Row) -> None:
        """Add ``other``'s calls (the same key, another process)."""
        self.calls += other.calls
        self.exceeded += other.exceeded
        self.unverified += other.unverified
        self.max_abs = max(self.max_abs, other.max_abs)
        self.max_rel = max(self.max_rel, other.max_rel)
        self.ratio = max(self.ratio, other.ratio)
        if self.first_exceeded is None:
            self.first_exceeded = other.first_exceeded
        for note in other.notes:
            self._note(note)


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


@dataclass(frozen=True)
class CallKey:
    """What a verified call is recorded under: its row (op x call site x shapes x dtype) and
    the parity tolerance it was compared with."""

    op: str
    impl: str
    site: str
    shapes: str
    dtype: str
    atol: float = 0.0
    rtol: float = 0.0


#: pending calls read back together at most (bounds the device memory they hold)
MAX_PENDING = 512


def _entry(impl: str) -> dict[str, Any]:
    return {"impl": impl, "calls": 0, "verified": 0, "unverified": 0}


class Recorder:
    """The rows of one process, and per op the calls seen, verified and not verified
    (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[tuple[str, ...], Row] = {}
        #: op -> {"impl": selected impl id, "calls": calls seen, "verified": calls verified,
        #: "unverified": calls that could not be verified}
        self.ops: dict[str, dict[str, Any]] = {}
        self._pending: list[tuple[Row, Measure, int, int]] = []

    @property
    def rows(self) -> dict[tuple[str, ...], Row]:
        """The rows, with every pending call read back."""
        self.flush()
        return self._rows

    def seen(self, op: str, impl: str) -> None:
        with self._lock:
            entry = self.ops.setdefault(op, _entry(impl))
            entry["impl"] = impl
            entry["calls"] += 1

    def _row(self, key: CallKey) -> Row:
        index = (key.op, key.impl, key.site, key.shapes, key.dtype)
        row = self._rows.get(index)
        if row is None:
            row = self._rows[index] = Row(*index, key.atol, key.rtol)
        return row

    def pend(self, key: CallKey, measure: Measure, call: int, step: int) -> None:
        """A verified call whose numbers are still on the device; read back by ``flush`` (at
        the latest when ``MAX_PENDING`` calls wait)."""
        with self._lock:
            self._pending.append((self._row(key), measure, call, step))
            self.ops.setdefault(key.op, _entry(key.impl))["verified"] += 1
            full = len(self._pending) >= MAX_PENDING
        if full:
            self.flush()

    def flush(self) -> None:
        """Read the pending calls' numbers back (one transfer) into their rows."""
        with self._lock:
            pending, self._pending = self._pending, []
        if not pending:
            return
        try:
            diffs = resolve([m for _, m, _, _ in pending])
        except Exception as exc:  # noqa: BLE001 - reading back never breaks the model's step
            with self._lock:
                for row, _, _, _ in pending:
                    row.not_verified(f"{type(exc).__name__}: {exc}")
                    self.ops[row.op]["verified"] -= 1
                    self.ops[row.op]["unverified"] += 1
            return
        with self._lock:
            for (row, _, call, step), diff in zip(pending, diffs):
                row.add(diff, call, step)

    def not_verified(self, op: str, impl: str, site: str, reason: str) -> None:
        """A call that could not be verified: counted apart, never as over tolerance."""
        with self._lock:
            self._row(CallKey(op, impl, site, "?", "?")).not_verified(reason)
            self.ops.setdefault(op, _entry(impl))["unverified"] += 1

    def add(self, key: CallKey, diff: Diff, call: int, step: int) -> None:
        """A verified call whose numbers are known."""
        with self._lock:
            self._row(key).add(diff, call, step)
            self.ops.setdefault(key.op, _entry(key.impl))["verified"] += 1

    def to_json(self, **extra: Any) -> dict[str, Any]:
        self.flush()
        with self._lock:
            rows = [{k: _out(v) for k, v in asdict(r).items()} for r in self._rows.values()]
            ops = {op: dict(entry) for op, entry in self.ops.items()}
        return {**extra, "ops": ops, "rows": rows}

    def clear(self) -> None:
        with self._lock:
            self._pending.clear()
            self._rows.clear()
            self.ops.clear()


def rows_from_json(data: dict[str, Any]) -> list[Row]:
    return [Row(**{k: _in(v) for k, v in row.items()}) for row in data.get("rows", [])]

"""The verification report: rows merged over processes, worst first, as text tables and JSON.

Each verifying process writes ``verify-<pid>.json`` into ``VLLM_FL_VERIFY_REPORT``
(``write``); ``read_dir`` merges the files of a directory; ``format_report`` prints a summary per
op (its worst error against its tolerance) and the rows, the calls over tolerance first."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from .record import Row, row_key, rows_from_json

__all__ = [
    "Report",
    "merge",
    "read_dir",
    "write",
    "format_report",
    "summary_line",
    "worst_first",
    "FILE_PREFIX",
]

FILE_PREFIX = "verify-"


@dataclass
class Report:
    """Rows (op x call site x shapes x dtype), per op the calls seen and verified, and what each
    process said of itself (pid, what was verified, torch.compile)."""

    rows: list[Row] = field(default_factory=list)
    ops: dict[str, dict[str, Any]] = field(default_factory=dict)
    processes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def exceeded(self) -> list[Row]:
        return [r for r in worst_first(self.rows) if r.exceeded]

    def culprits(self) -> list[str]:
        """The ops with a call over tolerance, worst first."""
        return list(dict.fromkeys(r.op for r in self.exceeded))

    def to_json(self) -> dict[str, Any]:
        from .record import _out

        return {
            "processes": self.processes,
            "ops": self.ops,
            "rows": [{k: _out(v) for k, v in r.__dict__.items()} for r in self.rows],
        }


def worst_first(rows: Iterable[Row]) -> list[Row]:
    """Rows with calls over tolerance first, then by error over tolerance, largest first."""
    return sorted(
        rows, key=lambda r: (r.exceeded == 0, r.unverified == 0, -r.ratio, r.op, r.site, r.shapes)
    )


def merge(reports: Iterable[dict[str, Any]]) -> Report:
    """One report of several processes' JSON reports."""
    merged: dict[tuple[str, ...], Row] = {}
    out = Report()
    for data in reports:
        out.processes.append({k: v for k, v in data.items() if k not in ("ops", "rows")})
        for row in rows_from_json(data):
            key = row_key(row)
            if key in merged:
                merged[key].merge(row)
            else:
                merged[key] = row
        for op, entry in data.get("ops", {}).items():
            mine = out.ops.setdefault(
                op, {"impl": entry["impl"], "calls": 0, "verified": 0, "unverified": 0}
            )
            for count in ("calls", "verified", "unverified"):
                mine[count] += entry.get(count, 0)
    out.rows = list(merged.values())
    return out


def write(directory: str | Path, data: dict[str, Any]) -> Path:
    """Write one process's report into ``directory`` (created if missing) as
    ``verify-<pid>.json``, atomically."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{FILE_PREFIX}{os.getpid()}.json"
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data, indent=1))
    os.replace(partial, path)
    return path


def read_dir(directory: str | Path) -> Report:
    """The merged report of every ``verify-*.json`` in ``directory``."""
    files = sorted(Path(directory).glob(f"{FILE_PREFIX}*.json"))
    return merge(json.loads(p.read_text()) for p in files)


def _num(value: float) -> str:
    if math.isinf(value):
        return "inf"
    return f"{value:.3g}"


def _ratio(text: str) -> float:
    return -1.0 if text == "-" else float(text)


def _first(row: Row) -> str:
    first = row.first_exceeded
    return "-" if first is None else f"call {first['call']} step {first['step']}"


def _table(header: list[str], lines: list[list[str]]) -> str:
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    out += [fmt.format(*line) for line in lines]
    return "\n".join(line.rstrip() for line in out)


def summary_line(report: Report) -> str:
    """One line that keeps apart the calls over tolerance and those not verified."""
    over = sum(r.exceeded for r in report.rows)
    unverified = sum(r.unverified for r in report.rows)
    verified = sum(e["verified"] for e in report.ops.values())
    line = f"{verified} call(s) verified, {over} over tolerance"
    if over:
        line += f" ({', '.join(report.culprits())})"
    line += f"; {unverified} not verified"
    if unverified:
        ops = dict.fromkeys(r.op for r in report.rows if r.unverified)
        line += f" ({', '.join(ops)})"
    return line


def format_report(report: Report, limit: int = 40) -> str:
    """The summary per op, then up to ``limit`` rows, worst first."""
    if not report.rows and not report.ops:
        return "vllm_fl verify: no call was verified"
    by_op: dict[str, list[Row]] = {}
    for row in report.rows:
        by_op.setdefault(row.op, []).append(row)
    summary = []
    for op, entry in sorted(report.ops.items()):
        rows = worst_first(r for r in by_op.get(op, []) if r.calls)
        worst = rows[0] if rows else None
        over = [r for r in rows if r.first_exceeded is not None]
        first = min(over, key=lambda r: r.first_exceeded["call"]) if over else None
        summary.append(
            [
                op,
                entry["impl"],
                str(entry["calls"]),
                str(entry["verified"]),
                str(entry.get("unverified", 0)),
                str(sum(r.exceeded for r in rows)),
                _num(worst.ratio) if worst else "-",
                _num(max((r.max_abs for r in rows), default=0.0)),
                _num(max((r.max_rel for r in rows), default=0.0)),
                f"{first.site} {_first(first)}" if first else "-",
            ]
        )
    # calls over tolerance first, then by error over tolerance; ops not verified last
    summary.sort(key=lambda line: (line[5] == "0", line[3] == "0", -_ratio(line[6]), line[0]))
    parts = [
        "vllm_fl verify: selected impls against the reference, per op",
        _table(
            [
                "op",
                "impl",
                "calls",
                "verified",
                "not verified",
                "over tol",
                "worst err/tol",
                "max abs",
                "max rel",
                "first over tol",
            ],
            summary,
        ),
        summary_line(report),
    ]
    rows = worst_first(report.rows)
    if rows:
        shown = rows[:limit]
        lines = [
            [
                r.op,
                r.site,
                r.shapes,
                r.dtype,
                str(r.calls),
                str(r.unverified),
                str(r.exceeded),
                _num(r.max_abs),
                _num(r.max_rel),
                _num(r.ratio),
                f"{_num(r.atol)}/{_num(r.rtol)}",
                _first(r),
            ]
            for r in shown
        ]
        parts += [
            "",
            "per op x call site x shapes x dtype, worst first:",
            _table(
                [
                    "op",
                    "call site",
                    "shapes",
                    "dtype",
                    "calls",
                    "not verified",
                    "over tol",
                    "max abs",
                    "max rel",
                    "err/tol",
                    "atol/rtol",
                    "first over tol",
                ],
                lines,
            ),
        ]
        if len(rows) > limit:
            parts.append(f"... {len(rows) - limit} more row(s) in the JSON report")
    notes = [f"{r.op} @ {r.site}: {n}" for r in rows if r.exceeded or r.unverified for n in r.notes]
    if notes:
        parts += ["", "notes:"] + [f"  {n}" for n in dict.fromkeys(notes)]
    return "\n".join(parts)

"""Tables of results: `Column` describes one, `text_table` lays rows out for a terminal,
`markdown_table` for the docs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    """One table column: its title, a format spec for numbers (e.g. ".1f") and an alignment
    (">" right, "<" left). None in a cell prints as `missing`."""

    title: str
    fmt: str = ""
    align: str = ">"
    missing: str = "-"

    def cell(self, value: object) -> str:
        if value is None:
            return self.missing
        if isinstance(value, str):
            return value
        return format(value, self.fmt)


def _cells(columns: Sequence[Column], rows: Iterable[Sequence[object]]) -> list[list[str]]:
    out = []
    for row in rows:
        if len(row) != len(columns):
            raise ValueError(f"a row has {len(row)} cells for {len(columns)} columns: {row!r}")
        out.append([col.cell(value) for col, value in zip(columns, row)])
    return out


def text_table(columns: Sequence[Column], rows: Iterable[Sequence[object]], sep: str = "  ") -> str:
    """Rows under a header line, each column as wide as its widest cell."""
    cells = _cells(columns, rows)
    widths = [max([len(col.title)] + [len(r[i]) for r in cells]) for i, col in enumerate(columns)]

    def line(values: Sequence[str]) -> str:
        return sep.join(
            f"{v:{col.align}{w}}" for v, col, w in zip(values, columns, widths)
        ).rstrip()

    return "\n".join([line([c.title for c in columns])] + [line(r) for r in cells])


def markdown_table(columns: Sequence[Column], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub-flavoured Markdown table; numeric columns (">") right-aligned."""
    cells = _cells(columns, rows)
    head = "| " + " | ".join(c.title for c in columns) + " |"
    rule = "|" + "|".join("---:" if c.align == ">" else "---" for c in columns) + "|"
    return "\n".join([head, rule] + ["| " + " | ".join(r) + " |" for r in cells])

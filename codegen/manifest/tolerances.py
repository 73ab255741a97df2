"""Tolerance tables: ``dtype -> {atol, rtol}``, at the top level and in an op's ``tests``."""

from __future__ import annotations

from .. import model as m
from .reader import Reader
from ..yamlnodes import Node

KEYS = ("atol", "rtol")


def read_tolerances(r: Reader, node: Node, what: str) -> tuple[tuple[str, m.Tolerance], ...]:
    table = r.map(node, what, "a mapping of dtype -> {atol, rtol}")
    result = []
    for entry in table.entries.values():
        if entry.key not in m.DTYPES:
            raise r.error(
                entry.key_line,
                f"unknown dtype {entry.key!r} in {what}",
                "one of " + ", ".join(m.DTYPES),
            )
        sub = f"{what}.{entry.key}"
        f = r.fields(entry.value, sub, "{atol: <number>, rtol: <number>}", KEYS)
        atol = r.number(f.require("atol", "a number").value, f"atol of {sub}")
        rtol = r.number(f.require("rtol", "a number").value, f"rtol of {sub}")
        f.done()
        result.append((entry.key, m.Tolerance(atol, rtol)))
    return tuple(result)

"""Which ops' selected impls change the greedy tokens: group testing over the ops, by halving.

``find_culprits(ops, changes)`` asks ``changes(group)`` — do the tokens differ from the
all-reference baseline when the ops of ``group`` run their selected impls and every other op the
reference? — first for all of them, then for each half of a group that changes them, down to
single ops. A group that changes the tokens while neither half does alone is tried one op at a
time; ops that change them only together are reported as one group. Answers are memoised.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

__all__ = ["Bisection", "find_culprits", "first_divergence"]


@dataclass
class Bisection:
    """``culprits``: groups of ops (single ops where one alone changes the tokens); ``tried``:
    every group asked, in order, with its answer."""

    culprits: list[list[str]] = field(default_factory=list)
    tried: list[tuple[tuple[str, ...], bool]] = field(default_factory=list)


def find_culprits(ops: Sequence[str], changes: Callable[[tuple[str, ...]], bool]) -> Bisection:
    result = Bisection()
    memo: dict[frozenset[str], bool] = {}

    def ask(group: Sequence[str]) -> bool:
        key = frozenset(group)
        if key not in memo:
            memo[key] = bool(changes(tuple(group)))
            result.tried.append((tuple(group), memo[key]))
        return memo[key]

    def search(group: list[str]) -> list[list[str]]:
        if len(group) == 1:
            return [group]
        mid = len(group) // 2
        found: list[list[str]] = []
        for half in (group[:mid], group[mid:]):
            if ask(half):
                found += search(half)
        if found:
            return found
        singles = [[op] for op in group if ask([op])]
        return singles or [group]

    ops = list(ops)
    if ops and ask(ops):
        result.culprits = search(ops)
    return result


def first_divergence(
    a: Sequence[Sequence[int]], b: Sequence[Sequence[int]]
) -> tuple[int, int] | None:
    """(prompt, position) of the first token where two generations differ, or None. A prompt
    whose tokens differ first at a later position than another's still counts: the earliest
    position over all prompts wins (then the lowest prompt index)."""
    best: tuple[int, int] | None = None
    for index, (x, y) in enumerate(zip(a, b)):
        pos = next((i for i, (s, t) in enumerate(zip(x, y)) if s != t), None)
        if pos is None and len(x) != len(y):
            pos = min(len(x), len(y))
        if pos is not None and (best is None or pos < best[1]):
            best = (index, pos)
    return best

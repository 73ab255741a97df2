"""White and black lists of names: the rules every list pair follows, written once.

Three pairs: vendors (``allow_vendors`` / ``deny_vendors``), the ops that may use FlagGems
(``flagos_whitelist`` / ``flagos_blacklist``) and the OOT classes (``oot_whitelist`` /
``oot_blacklist``). Names are lower-case (the value parsers lower-case them).

- ``verdict``: a name passes when the whitelist, if there is one, lists it and the blacklist does
  not. A whitelist of None means "no whitelist"; an empty whitelist allows nothing.
- ``check_exclusive``: the two lists of an exclusive pair (``LIST_FAMILIES``: FlagGems ops and
  OOT classes, not vendors) must not both be set by one source.
- ``displaced``: a source that sets one list of an exclusive pair replaces the other list of the
  sources below it too, so a whitelist from the environment drops a blacklist from the platform
  YAML, and the other way round.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping

from ..types import ConfigError

__all__ = ["LIST_FAMILIES", "verdict", "check_exclusive", "displaced"]

#: family -> (whitelist, blacklist): the exclusive pairs, as ``SelectionPolicy`` fields
LIST_FAMILIES: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "flagos": ("flagos_whitelist", "flagos_blacklist"),
        "oot": ("oot_whitelist", "oot_blacklist"),
    }
)


def verdict(
    names: Iterable[str], whitelist: frozenset[str] | None, blacklist: frozenset[str]
) -> str | None:
    """None when ``names`` (one thing under its aliases) pass: the whitelist, if any, lists one of
    them and the blacklist lists none. Otherwise the list that keeps them out: "whitelist" or
    "blacklist"."""
    names = frozenset(names)
    if whitelist is not None and not names & whitelist:
        return "whitelist"
    if names & blacklist:
        return "blacklist"
    return None


def check_exclusive(
    is_set: Callable[[str], bool], where: str = "", label: Callable[[str], str] = str
) -> None:
    """Raise ``ConfigError`` when one source sets both lists of an exclusive pair.

    ``is_set(setting)``: whether the source sets that list; ``where``: the message's prefix naming
    the source; ``label(setting)``: how the message shows what the source set (the setting's name,
    or ``VAR='value'``).
    """
    for whitelist, blacklist in LIST_FAMILIES.values():
        if is_set(whitelist) and is_set(blacklist):
            raise ConfigError(
                f"{where}{label(whitelist)} and {label(blacklist)} are mutually exclusive; "
                "set only one"
            )


def displaced(changes: Mapping[str, Any]) -> frozenset[str]:
    """The lists that ``changes`` (settings of a higher source) replace besides their own keys:
    the blacklist of a pair whose whitelist they set (to something other than None), and the
    whitelist of a pair whose blacklist they set."""
    out: set[str] = set()
    for whitelist, blacklist in LIST_FAMILIES.values():
        if whitelist in changes and blacklist not in changes and changes[whitelist] is not None:
            out.add(blacklist)
        if blacklist in changes and whitelist not in changes:
            out.add(whitelist)
    return frozenset(out)

"""Names in the policy that the registry does not know.

Op names, ``impl:<id>`` and ``vendor:<name>`` tokens and vendor allow/deny lists can only be
checked against the registered implementations, which exist once the built-in backends and the
plugins are loaded. A name nobody registered is most likely a typo (``rms_nrom``, ``cdua``) that
would otherwise be silently inert, so it is a WARNING naming the setting's source; not an error,
because a plugin may still register the name later.
"""

from __future__ import annotations

import difflib
from typing import Iterable

from ..config.selection import SelectionPolicy
from ..logger_manager import get_logger
from ..registry import OpRegistry

__all__ = ["unknown_names", "warn_unknown_names"]

logger = get_logger()


def _known(names: Iterable[str], name: str) -> str:
    names = sorted(names)
    close = difflib.get_close_matches(name, names, n=3)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    shown = ", ".join(names[:20]) + (", ..." if len(names) > 20 else "")
    return f"{shown or '(none)'}{hint}"


def unknown_names(policy: SelectionPolicy, registry: OpRegistry) -> list[str]:
    """One message per name in ``policy`` that ``registry`` does not know."""
    ops = set(registry.list_operators())
    impls = {op: registry.get_implementations(op) for op in ops}
    vendors = {i.vendor for found in impls.values() for i in found if i.vendor}
    src = policy.sources.get
    out: list[str] = []
    where = src("per_op_order", "default")
    for op, tokens in policy.per_op_order.items():
        if op not in ops:
            out.append(
                f"{where}: op_backends lists {op!r}, but there is no registered op of that name; "
                f"registered ops: {_known(ops, op)}"
            )
            continue
        ids = {i.impl_id.lower() for i in impls[op]}
        for tok in tokens:
            if tok.startswith("impl:") and tok[5:] not in ids:
                out.append(
                    f"{where}: token {tok!r} names no registered impl of op {op!r}; its impls: "
                    f"{_known(ids, tok[5:])}"
                )
            elif tok.startswith("vendor:") and tok[7:] not in vendors:
                out.append(
                    f"{where}: token {tok!r} for op {op!r}: no backend declares vendor "
                    f"{tok[7:]!r}; declared vendors: {_known(vendors, tok[7:])}"
                )
    for key in ("allow_vendors", "deny_vendors"):
        for vendor in sorted(getattr(policy, key) or ()):
            if vendor not in vendors:
                out.append(
                    f"{src(key, 'default')}: {key} lists {vendor!r}, which no backend declares; "
                    f"declared vendors: {_known(vendors, vendor)}"
                )
    return out


def warn_unknown_names(policy: SelectionPolicy, registry: OpRegistry) -> list[str]:
    """Log each message of ``unknown_names`` at WARNING; returns them."""
    messages = unknown_names(policy, registry)
    for msg in messages:
        logger.warning("%s", msg)
    return messages

"""Core types: implementation kinds, default priorities and one registered implementation."""

from __future__ import annotations

import enum
import inspect
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

__all__ = ["BackendImplKind", "BackendPriority", "OpImpl", "DispatchError", "ConfigError"]

_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")


class DispatchError(RuntimeError):
    """No implementation of an op could be selected or run."""


class ConfigError(ValueError):
    """An invalid dispatch setting; the message names the source, the value and what is allowed."""


class BackendImplKind(str, enum.Enum):
    """The kind of an implementation; its value is the dispatch token of that family."""

    DEFAULT = "flagos"
    VENDOR = "vendor"
    REFERENCE = "reference"

    def __str__(self) -> str:
        return self.value


class BackendPriority(enum.IntEnum):
    """Default priority of each kind (higher is preferred); spaced by 50 for insertions."""

    DEFAULT = 150
    VENDOR = 100
    REFERENCE = 50


_KIND_PRIORITY = {
    BackendImplKind.DEFAULT: int(BackendPriority.DEFAULT),
    BackendImplKind.VENDOR: int(BackendPriority.VENDOR),
    BackendImplKind.REFERENCE: int(BackendPriority.REFERENCE),
}


def _coerce_kind(kind: Any) -> BackendImplKind:
    if isinstance(kind, BackendImplKind):
        return kind
    if isinstance(kind, str):
        for k in BackendImplKind:
            if kind.lower() in (k.value, k.name.lower()):
                return k
    allowed = ", ".join(repr(k.value) for k in BackendImplKind)
    raise ValueError(f"OpImpl: invalid kind {kind!r}; allowed: {allowed}")


@dataclass(frozen=True)
class OpImpl:
    """One implementation of one operator.

    ``available`` is a zero-argument callable returning whether the implementation can run here
    (None = always available). If it has a ``reason`` attribute (see
    ``backends.availability.Probe``), ``explain`` shows it when the implementation is unavailable. A callable ``fn._is_available``
    (upstream vllm-plugin-FL's convention, read at each check) is honoured as well: the
    implementation is available only when every check present says so.

    ``supports`` (ops.yaml's ``supports:`` of the impl) maps arguments of ``fn`` to the values
    the implementation serves (None: the argument left out); a call passing another value is not
    one for this implementation, and the dispatch gives it to the next candidate
    (``refusal``). None or empty: every call.
    """

    op_name: str
    impl_id: str
    kind: BackendImplKind
    fn: Callable[..., Any]
    vendor: str | None = None
    priority: int | None = None
    available: Callable[[], bool] | None = field(default=None, compare=False)
    supports: Mapping[str, tuple[Any, ...]] | None = field(default=None, compare=False)
    #: (argument, position in fn's signature or -1 for keyword-only, default, values served)
    _checks: tuple[tuple[str, int, Any, tuple[Any, ...]], ...] = field(
        default=(), init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        for attr in ("op_name", "impl_id"):
            value = getattr(self, attr)
            if not isinstance(value, str) or not _NAME_RE.match(value):
                raise ValueError(
                    f"OpImpl: invalid {attr} {value!r}; expected a non-empty name of letters, "
                    "digits, '_', '.', '-'"
                )
        kind = _coerce_kind(self.kind)
        object.__setattr__(self, "kind", kind)
        if not callable(self.fn):
            raise TypeError(f"OpImpl {self.impl_id!r} for op {self.op_name!r}: fn is not callable")
        if kind is BackendImplKind.VENDOR:
            if not isinstance(self.vendor, str) or not _NAME_RE.match(self.vendor):
                raise ValueError(
                    f"OpImpl {self.impl_id!r} for op {self.op_name!r}: kind=vendor requires "
                    f"vendor=<name>, got {self.vendor!r}"
                )
            object.__setattr__(self, "vendor", self.vendor.lower())
        elif self.vendor is not None:
            raise ValueError(
                f"OpImpl {self.impl_id!r} for op {self.op_name!r}: vendor={self.vendor!r} is "
                f"only meaningful with kind=vendor, not kind={kind.value}"
            )
        if self.priority is None:
            object.__setattr__(self, "priority", _KIND_PRIORITY[kind])
        elif isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise TypeError(
                f"OpImpl {self.impl_id!r} for op {self.op_name!r}: priority must be an int, "
                f"got {self.priority!r}"
            )
        else:
            object.__setattr__(self, "priority", int(self.priority))
        if self.available is not None and not callable(self.available):
            raise TypeError(
                f"OpImpl {self.impl_id!r} for op {self.op_name!r}: available must be a "
                "zero-argument callable or None"
            )
        if self.supports:
            object.__setattr__(self, "_checks", self._support_checks(dict(self.supports)))

    def _support_checks(
        self, supports: dict[str, tuple[Any, ...]]
    ) -> tuple[tuple[str, int, Any, tuple[Any, ...]], ...]:
        """Where each argument of ``supports`` sits in a call of ``fn`` (checked once, here)."""
        params = list(inspect.signature(self.fn).parameters.values())
        checks = []
        for name, values in supports.items():
            found = [(i, p) for i, p in enumerate(params) if p.name == name]
            if not found or not isinstance(values, tuple) or not values:
                raise ValueError(
                    f"OpImpl {self.impl_id!r} for op {self.op_name!r}: supports[{name!r}] = "
                    f"{values!r}; expected a non-empty tuple of values of an argument of "
                    f"{self.fn_name()}"
                )
            i, p = found[0]
            position = -1 if p.kind is p.KEYWORD_ONLY else i
            default = None if p.default is p.empty else p.default
            checks.append((name, position, default, values))
        return tuple(checks)

    def refusal(self, args: tuple, kwargs: Mapping[str, Any]) -> str | None:
        """Why this implementation does not serve the call ``fn(*args, **kwargs)`` (an argument
        value outside its ``supports``), or None when it does. Costs nothing without
        ``supports``."""
        for name, position, default, values in self._checks:
            if 0 <= position < len(args):
                value = args[position]
            else:
                value = kwargs.get(name, default)
            if value is None:
                if None not in values:
                    return f"{name}=None (serves {name} in {list(values)})"
            elif not any(v is not None and type(v) is type(value) and v == value for v in values):
                shown = type(value).__name__ if hasattr(value, "shape") else repr(value)
                served = "None" if values == (None,) else f"in {list(values)}"
                return f"{name}={shown} (serves {name} {served})"
        return None

    def check_available(self) -> tuple[bool, str | None]:
        """(available, reason-when-not); an exception from a check counts as unavailable."""
        checks = []
        if self.available is not None:
            checks.append(("available()", self.available))
        upstream = getattr(self.fn, "_is_available", None)
        if upstream is not None:
            checks.append(("fn._is_available()", upstream))
        for label, check in checks:
            if not callable(check):
                return False, f"{label[:-2]} is {check!r}, not a zero-argument callable"
            try:
                ok = bool(check())
            except Exception as exc:  # noqa: BLE001 - availability must never break dispatch
                return False, f"{label} raised {type(exc).__name__}: {exc}"
            if not ok:
                reason = getattr(check, "reason", None)
                return False, (
                    reason if isinstance(reason, str) and reason else f"{label} returned False"
                )
        return True, None

    def is_available(self) -> bool:
        return self.check_available()[0]

    def describe(self) -> str:
        return f"'{self.impl_id}' (kind={self.kind.value}, vendor={self.vendor})"

    def fn_name(self) -> str:
        fn = self.fn
        mod = getattr(fn, "__module__", None) or "?"
        name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
        return f"{mod}.{name}"

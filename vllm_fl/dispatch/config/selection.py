"""``SelectionPolicy``: what may run and in which order, a plain typed value.

Its fields are the policy's rows of the settings table (``settings.POLICY_SETTINGS``), written
out with their types and defaults; the module refuses to import when they and the table differ.
A value is taken as it is when it already is what its row's parser returns (the row's check,
``holds``): the configuration loader hands over the values it parsed, and they are not parsed
again. Any other value is a spelling for the row's parser, once, so every way of making a policy
(the constructor, ``from_dict``, ``replace``, ``dataclasses.replace``) reads a value like its
environment variable does: ``SelectionPolicy(prefer="invalid")`` fails like
``VLLM_FL_PREFER=invalid``, ``strict="false"`` is False and vendor names are lower-cased. This
module reads no environment variable and no file.
"""

from __future__ import annotations

import dataclasses
from dataclasses import InitVar, dataclass, field
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Sequence

from ..types import BackendImplKind, ConfigError, OpImpl
from . import lists
from .settings import POLICY_SETTINGS, Setting
from .values import PREFER_CHOICES

__all__ = ["SelectionPolicy", "DEFAULT_ORDERS", "POLICY_FIELDS", "token_matches"]

DEFAULT_ORDERS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "flagos": ("flagos", "vendor", "reference"),
        "vendor": ("vendor", "flagos", "reference"),
        "reference": ("reference", "flagos", "vendor"),
    }
)
assert set(DEFAULT_ORDERS) == set(PREFER_CHOICES)


def token_matches(token: str, impl: OpImpl) -> bool:
    """Whether the (normalised) selection token ``token`` names ``impl``."""
    if token == "flagos":
        return impl.kind is BackendImplKind.DEFAULT
    if token == "reference":
        return impl.kind is BackendImplKind.REFERENCE
    if token == "vendor":
        return impl.kind is BackendImplKind.VENDOR
    if token.startswith("vendor:"):
        return impl.kind is BackendImplKind.VENDOR and impl.vendor == token[7:]
    if token.startswith("impl:"):
        return impl.impl_id.lower() == token[5:]
    return False


@dataclass(frozen=True, eq=True)
class SelectionPolicy:
    """What may run and in which order. Immutable and validated; derive variants with
    ``replace`` (or ``dataclasses.replace``).

    ``allow_vendors`` / ``flagos_whitelist`` / ``oot_whitelist``: None means no whitelist, an
    empty set allows nothing. A whitelist and the blacklist of its family are mutually
    exclusive. ``compile_prefer`` is the preference while torch.compile traces an op; None means
    ``prefer``. vLLM makes the same split: under Inductor it lets the compiler generate its norms
    and activations from their PyTorch formulas, and calls its CUDA kernels only in eager mode.
    ``source`` (not a field) names the caller in error messages.
    """

    prefer: str = "flagos"
    compile_prefer: str | None = None
    strict: bool = False
    per_op_order: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    deny_vendors: frozenset[str] = frozenset()
    allow_vendors: frozenset[str] | None = None
    enabled: bool = True
    use_flaggems: bool = True
    flagos_whitelist: frozenset[str] | None = None
    flagos_blacklist: frozenset[str] = frozenset()
    oot_enabled: bool = True
    oot_whitelist: frozenset[str] | None = None
    oot_blacklist: frozenset[str] = frozenset()
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)
    source: InitVar[str] = "SelectionPolicy"

    __hash__ = None  # type: ignore[assignment]

    def __post_init__(self, source: str) -> None:
        for name, setting in POLICY_FIELDS.items():
            value = getattr(self, name)
            if not setting.holds(value):  # type: ignore[misc]
                # a spelling of the value (``strict="false"``), for its parser
                object.__setattr__(self, name, setting.parse(value, f"{source}:{name}"))
        lists.check_exclusive(lambda name: getattr(self, name) != _DEFAULTS[name], f"{source}: ")
        object.__setattr__(self, "per_op_order", MappingProxyType(dict(self.per_op_order)))
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))

    @staticmethod
    def _check_names(names: Iterable[str], source: str) -> None:
        unknown = sorted(set(names) - set(POLICY_FIELDS))
        if unknown:
            raise ConfigError(
                f"{source}: unknown setting(s) {unknown}; allowed: " + ", ".join(POLICY_FIELDS)
            )

    @classmethod
    def from_dict(
        cls,
        prefer: Any = "flagos",
        strict: Any = False,
        per_op_order: Mapping[str, Any] | None = None,
        deny_vendors: Iterable[str] | str | None = None,
        allow_vendors: Iterable[str] | str | None = None,
        *,
        source: str = "SelectionPolicy.from_dict",
        **others: Any,
    ) -> "SelectionPolicy":
        """Build a validated policy; unspecified settings take their built-in defaults.

        ``others`` accepts the remaining fields (``compile_prefer``, ``enabled``, ``use_flaggems``,
        ``flagos_whitelist``, ``flagos_blacklist``, ``oot_enabled``, ``oot_whitelist``,
        ``oot_blacklist``); None for any of them means its default.
        """
        cls._check_names(others, source)
        lists.check_exclusive(lambda name: others.get(name) is not None, f"{source}: ")
        given = {
            "prefer": prefer,
            "strict": strict,
            "per_op_order": per_op_order,
            "deny_vendors": deny_vendors,
            "allow_vendors": allow_vendors,
            **others,
        }
        kw = {k: (_DEFAULTS[k] if val is None else val) for k, val in given.items()}
        return cls(**kw, sources={k: source for k in kw}, source=source)

    def replace(self, source: str = "runtime", **changes: Any) -> "SelectionPolicy":
        """A copy with ``changes`` validated and applied, their source recorded as ``source``.
        Setting one list of a white/black family clears the other one."""
        self._check_names(changes, source)
        base = {name: getattr(self, name) for name in POLICY_FIELDS}
        for name in lists.displaced(changes):
            base[name] = _DEFAULTS[name]
        base.update(changes)
        sources = {**self.sources, **{name: source for name in changes}}
        return SelectionPolicy(**base, sources=sources, source=source)

    # -- selection ---------------------------------------------------------------------------

    @property
    def splits_traced(self) -> bool:
        """Whether ops traced by torch.compile follow another preference than eager calls."""
        return self.compile_prefer is not None and self.compile_prefer != self.prefer

    def prefer_for(self, traced: bool = False) -> str:
        """The preference in force for eager calls, or for calls traced by torch.compile."""
        if traced and self.compile_prefer is not None:
            return self.compile_prefer
        return self.prefer

    def order_for(self, op_name: str, traced: bool = False) -> tuple[tuple[str, ...], bool]:
        """(tokens, restricted): the per-op list (restricts, in both modes) or the default order
        of the preference in force (``compile_prefer`` while traced, if set)."""
        tokens = self.per_op_order.get(op_name)
        if tokens is not None:
            return tokens, True
        return DEFAULT_ORDERS[self.prefer_for(traced)], False

    def exclusion_reason(self, impl: OpImpl) -> str | None:
        """Why ``impl`` may not run under this policy (None if it may)."""
        src = self.sources.get
        if impl.kind is BackendImplKind.VENDOR:
            vendor = (impl.vendor or "").lower()
            verdict = lists.verdict((vendor,), self.allow_vendors, self.deny_vendors)
            if verdict == "whitelist":
                return (
                    f"vendor '{vendor}' not in allow_vendors {sorted(self.allow_vendors or ())} "
                    f"({src('allow_vendors', 'default')})"
                )
            if verdict == "blacklist":
                return f"vendor '{vendor}' in deny_vendors ({src('deny_vendors', 'default')})"
        elif impl.kind is BackendImplKind.DEFAULT:
            if not self.enabled:
                return f"dispatch features disabled ({src('enabled', 'default')})"
            if not self.use_flaggems:
                return f"FlagGems disabled ({src('use_flaggems', 'default')})"
            verdict = lists.verdict(
                (impl.op_name.lower(),), self.flagos_whitelist, self.flagos_blacklist
            )
            if verdict == "whitelist":
                return f"op not in flagos_whitelist ({src('flagos_whitelist', 'default')})"
            if verdict == "blacklist":
                return f"op in flagos_blacklist ({src('flagos_blacklist', 'default')})"
        return None

    def order(self, op_name: str, impls: Sequence[OpImpl], traced: bool = False) -> list[OpImpl]:
        """Order ``impls`` (already filtered) by the op's tokens, then priority (stable)."""
        tokens, _ = self.order_for(op_name, traced)
        out: list[OpImpl] = []
        seen: set[str] = set()
        for tok in tokens:
            group = [i for i in impls if i.impl_id not in seen and token_matches(tok, i)]
            group.sort(key=lambda i: -i.priority)
            for i in group:
                seen.add(i.impl_id)
                out.append(i)
        return out

    # -- OOT layer registration --------------------------------------------------------------

    @property
    def oot_active(self) -> bool:
        """Whether any vLLM layer or function may be replaced at all (``enabled`` and
        ``oot_enabled``); ``oot_allowed`` says which."""
        return self.enabled and self.oot_enabled

    def oot_allowed(self, name: str, *aliases: str) -> bool:
        """Whether the out-of-tree replacement ``name`` (in-tree class name, e.g. "RMSNorm") may be
        registered. ``aliases`` (e.g. the op name "rms_norm") match the lists as well; matching is
        case-insensitive. ``oot_active`` gates everything.
        """
        if not self.oot_active:
            return False
        names = (n.lower() for n in (name, *aliases))
        return lists.verdict(names, self.oot_whitelist, self.oot_blacklist) is None


def _fields_and_rows() -> Mapping[str, Setting]:
    """Field name -> its row, in field order; an AssertionError naming every field whose row is
    missing or has another default, and every row without its field."""
    rows = {s.name: s for s in POLICY_SETTINGS}
    fields = {f.name: f for f in dataclasses.fields(SelectionPolicy) if f.name != "sources"}
    default = {
        name: f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]
        for name, f in fields.items()
    }
    differ = [n for n in fields if n not in rows or default[n] != rows[n].default]
    differ += sorted(set(rows) - set(fields))
    if differ:
        raise AssertionError(f"SelectionPolicy fields and the settings table differ: {differ}")
    return MappingProxyType({name: rows[name] for name in fields})


#: the policy's settings, in field order: field name -> its row of the settings table
POLICY_FIELDS: Mapping[str, Setting] = _fields_and_rows()
_DEFAULTS: Mapping[str, Any] = {name: row.default for name, row in POLICY_FIELDS.items()}

"""Registers the generated out-of-tree layer classes over vLLM's in-tree ones.

`register_oot_classes()` is what the `vllm.general_plugins` entry point runs in every vLLM
process (more than once in some): for each entry of `vllm_fl.ops.OOT_CLASSES` the OOT policy
allows, it checks the class (a subclass of the in-tree class, with `forward_oot` and no
`__init__` of its own) and calls `CustomOp.register_oot(_decorated_op_cls=cls, name=<in-tree
name>)` unless that name is registered already. It logs once which classes it replaced and
then resolves every op through the dispatch manager, so that selection (and its
`Op '<op>' using '<impl_id>'` log) happens before torch.compile traces a model.

Which classes are replaced is the OOT policy's decision (`oot_policy()`): the global switch
`VLLM_FL_PREFER_ENABLED`, `VLLM_FL_OOT_ENABLED`, and `VLLM_FL_OOT_WHITELIST` /
`VLLM_FL_OOT_BLACKLIST` / the config file's `oot_blacklist`. An entry matches either the
in-tree class name (`RMSNorm`) or vLLM's op name (`rms_norm`), case-insensitively.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from dataclasses import dataclass, field

from vllm_fl import compat

logger = logging.getLogger("vllm_fl")

_lock = threading.Lock()
_replaced: dict[str, str] = {}  # in-tree name -> "module:Class" registered by us
_logged = False


@dataclass(frozen=True)
class OotPolicy:
    """Which in-tree classes may be replaced. `whitelist` None means "all but the blacklist"."""

    enabled: bool = True
    whitelist: frozenset[str] | None = None
    blacklist: frozenset[str] = field(default_factory=frozenset)
    source: str = "defaults"

    def allows(self, *names: str) -> bool:
        """True if a class known by any of `names` (class name, op name) may be replaced."""
        keys = {n.lower() for n in names if n}
        if not self.enabled:
            return False
        if self.whitelist is not None:
            return bool(keys & self.whitelist)
        return not keys & self.blacklist


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(
        f"environment variable {name}={raw!r} is not a boolean; "
        f"use one of {sorted(_TRUE | _FALSE)}"
    )


def _env_list(name: str) -> frozenset[str] | None:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return None
    return frozenset(item.strip().lower() for item in raw.split(",") if item.strip())


def _config_file_oot_blacklist() -> frozenset[str] | None:
    path = os.environ.get("VLLM_FL_CONFIG")
    if not path:
        return None
    import yaml

    if not os.path.isfile(path):
        raise FileNotFoundError(f"VLLM_FL_CONFIG={path!r}: no such file")
    with open(path) as f:
        data = yaml.safe_load(f) or {}
    entries = data.get("oot_blacklist")
    if entries is None:
        return frozenset()
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        raise ValueError(f"{path}: oot_blacklist must be a list of names, got {entries!r}")
    return frozenset(e.strip().lower() for e in entries)


def oot_policy() -> OotPolicy:
    """The OOT policy from the environment and the configuration file.

    Precedence, as the configuration reference states it: VLLM_FL_OOT_WHITELIST (replaces only
    the listed classes) > VLLM_FL_OOT_BLACKLIST > the config file's oot_blacklist > replace all.
    Whitelist and blacklist variables together are an error.
    """
    enabled = _env_bool("VLLM_FL_PREFER_ENABLED", True) and _env_bool("VLLM_FL_OOT_ENABLED", True)
    whitelist = _env_list("VLLM_FL_OOT_WHITELIST")
    blacklist = _env_list("VLLM_FL_OOT_BLACKLIST")
    if whitelist is not None and blacklist is not None:
        raise ValueError(
            "VLLM_FL_OOT_WHITELIST and VLLM_FL_OOT_BLACKLIST are mutually exclusive; unset one"
        )
    if not enabled:
        return OotPolicy(enabled=False, source="VLLM_FL_PREFER_ENABLED/VLLM_FL_OOT_ENABLED")
    if whitelist is not None:
        return OotPolicy(whitelist=whitelist, source="VLLM_FL_OOT_WHITELIST")
    if blacklist is not None:
        return OotPolicy(blacklist=blacklist, source="VLLM_FL_OOT_BLACKLIST")
    from_file = _config_file_oot_blacklist()
    if from_file is not None:
        return OotPolicy(blacklist=from_file, source="VLLM_FL_CONFIG oot_blacklist")
    return OotPolicy()


def _load_class(target: str) -> type:
    module_name, _, qualname = target.partition(":")
    obj = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _in_tree_base(cls: type, in_tree_name: str) -> type:
    """The in-tree class `cls` replaces, checked: `cls` subclasses it, overrides forward_oot and
    keeps its constructor (CustomOp.__new__ builds ours with the in-tree arguments)."""
    base = next((c for c in cls.__mro__[1:] if c.__name__ == in_tree_name), None)
    if base is None or not issubclass(cls, compat.custom_op_base()):
        raise TypeError(
            f"{cls.__module__}.{cls.__qualname__} cannot replace vLLM's {in_tree_name}: "
            f"it must subclass {in_tree_name} (its bases: {[c.__name__ for c in cls.__mro__]})"
        )
    if "forward_oot" not in vars(cls):
        raise TypeError(f"{cls.__qualname__} must define forward_oot (it replaces {in_tree_name})")
    if "__init__" in vars(cls):
        raise TypeError(
            f"{cls.__qualname__} must not define __init__: vLLM constructs it with "
            f"{in_tree_name}'s arguments"
        )
    return base


def _oot_classes() -> dict[str, str]:
    from vllm_fl.ops import OOT_CLASSES

    return dict(OOT_CLASSES)


def op_name_of(in_tree_cls: type) -> str:
    """vLLM's registered op name of an in-tree class ('rms_norm' for RMSNorm)."""
    return vars(in_tree_cls).get("name", "") or ""


def register_oot_classes(policy: OotPolicy | None = None) -> dict[str, str]:
    """Register every allowed generated class over its in-tree class; idempotent.

    Returns in-tree name -> "module:Class" of every class of ours that is registered now
    (including those registered by an earlier call).
    """
    global _logged
    policy = policy or oot_policy()
    with _lock:
        registry = compat.oot_registry()
        newly: list[str] = []
        excluded: list[str] = []
        foreign: list[str] = []
        if policy.enabled:
            for in_tree_name, target in _oot_classes().items():
                cls = _load_class(target)
                base = _in_tree_base(cls, in_tree_name)
                if not policy.allows(in_tree_name, op_name_of(base)):
                    excluded.append(in_tree_name)
                    continue
                existing = registry.get(in_tree_name)
                if existing is cls:
                    _replaced[in_tree_name] = target
                    continue
                if existing is not None:
                    foreign.append(f"{in_tree_name} (by {existing.__module__}.{existing.__name__})")
                    continue
                compat.register_oot(cls, in_tree_name)
                _replaced[in_tree_name] = target
                newly.append(f"{in_tree_name} -> {cls.__name__}")
        if not _logged:
            _logged = True
            if not policy.enabled:
                logger.info("vllm_fl: OOT layer replacement disabled (%s)", policy.source)
            else:
                logger.info(
                    "vllm_fl: replaced vLLM layers: %s%s",
                    ", ".join(newly) or "none",
                    f"; kept vLLM's ({policy.source}): {', '.join(excluded)}" if excluded else "",
                )
        if foreign:
            logger.warning(
                "vllm_fl: left in place, registered out of tree by another plugin: %s",
                ", ".join(foreign),
            )
        return dict(_replaced)


def replaced_classes() -> dict[str, str]:
    """In-tree name -> "module:Class" of what this process registered (empty before)."""
    return dict(_replaced)


def resolve_ops() -> None:
    """Resolve every op through the dispatch manager now, before any model is traced."""
    from vllm_fl.dispatch import get_default_manager

    get_default_manager().resolve_all()


def _reset_for_tests() -> None:
    """Forget this process's registrations (tests only)."""
    global _logged
    with _lock:
        registry = compat.oot_registry()
        for name in list(_replaced):
            registry.pop(name, None)
        _replaced.clear()
        _logged = False

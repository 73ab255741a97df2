"""Registers the generated out-of-tree layer classes over vLLM's in-tree ones.

`register_oot_classes()` is what the `vllm.general_plugins` entry point runs in every vLLM
process (more than once in some): for each entry of `vllm_fl.ops.OOT_CLASSES` the OOT policy
allows, it checks the class (a subclass of the in-tree class, with `forward_oot` and no
`__init__` of its own) and calls `CustomOp.register_oot(_decorated_op_cls=cls, name=<in-tree
name>)` unless that name is registered already. It logs once which classes it replaced and
then resolves every op through the dispatch manager, so that selection (and its
`Op '<op>' using '<impl_id>'` log) happens before torch.compile traces a model.

Which classes are replaced is the dispatch policy's decision (`current_policy()`): the switch
`VLLM_FL_PREFER_ENABLED`, `VLLM_FL_OOT_ENABLED`, and `VLLM_FL_OOT_WHITELIST` /
`VLLM_FL_OOT_BLACKLIST` / the config file's `oot_blacklist`. An entry matches either the
in-tree class name (`RMSNorm`) or vLLM's op name (`rms_norm`), case-insensitively.
"""

from __future__ import annotations

import importlib
import logging
import threading

from vllm_fl import compat

LOGGER_NAME = "vllm_fl.vllm"
logger = logging.getLogger(LOGGER_NAME)

_lock = threading.Lock()
_replaced: dict[str, str] = {}  # in-tree name -> "module:Class" registered by us
_logged = False


def current_policy():
    """The dispatch's selection policy in force (`vllm_fl.dispatch.policy.get_policy()`): its
    `enabled`, `oot_enabled`, `oot_whitelist` / `oot_blacklist` come from VLLM_FL_PREFER_ENABLED,
    VLLM_FL_OOT_ENABLED, VLLM_FL_OOT_WHITELIST / VLLM_FL_OOT_BLACKLIST, the config file's
    oot_blacklist and the platform YAML, with the precedence of the configuration reference."""
    from vllm_fl.dispatch.policy import get_policy

    return get_policy()


def configure_logging() -> None:
    """Give the integration's logger the dispatch's level (VLLM_FL_LOG_LEVEL) and, when nothing
    else handles its records (vLLM configures only its own `vllm` logger), a stderr handler."""
    from vllm_fl.dispatch.policy import get_config

    logger.setLevel(get_config().log_level)
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        # The process name tells vLLM's processes apart (MainProcess, EngineCore, workers).
        handler.setFormatter(
            logging.Formatter("[%(levelname)s] %(name)s (%(processName)s): %(message)s")
        )
        logger.addHandler(handler)


def _describe(policy) -> str:
    sources = getattr(policy, "sources", {}) or {}
    if not (policy.enabled and policy.oot_enabled):
        key = "enabled" if not policy.enabled else "oot_enabled"
        return sources.get(key, key)
    key = "oot_whitelist" if policy.oot_whitelist is not None else "oot_blacklist"
    return sources.get(key, key)


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
    """vLLM's registered op name of an in-tree class ('rms_norm' for RMSNorm; inherited where
    vLLM registers a base class, as 'rotary_embedding' on RotaryEmbeddingBase)."""
    return getattr(in_tree_cls, "name", "") or ""


def register_oot_classes(policy=None) -> dict[str, str]:
    """Register every allowed generated class over its in-tree class; idempotent.

    Returns in-tree name -> "module:Class" of every class of ours that is registered now
    (including those registered by an earlier call).
    """
    global _logged
    policy = policy or current_policy()
    configure_logging()
    with _lock:
        registry = compat.oot_registry()
        newly: list[str] = []
        excluded: list[str] = []
        foreign: list[str] = []
        if policy.enabled and policy.oot_enabled:
            for in_tree_name, target in _oot_classes().items():
                cls = _load_class(target)
                base = _in_tree_base(cls, in_tree_name)
                if not policy.oot_allowed(in_tree_name, op_name_of(base)):
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
            if not (policy.enabled and policy.oot_enabled):
                logger.info("vllm_fl: OOT layer replacement disabled (%s)", _describe(policy))
            else:
                logger.info(
                    "vllm_fl: replaced vLLM layers: %s%s",
                    ", ".join(newly) or "none",
                    (
                        f"; kept vLLM's ({_describe(policy)}): {', '.join(excluded)}"
                        if excluded
                        else ""
                    ),
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

"""Plugin discovery: ``VLLM_FL_PLUGIN_MODULES`` and the entry-point group ``vllm_fl.plugin``.

A plugin is a module (or, for an entry point, any object) exposing ``vllm_fl_register(registry)``
(the hook name of upstream vllm-plugin-FL, so its plugins load unchanged) or
``register(registry)``; when a module has both, ``vllm_fl_register`` is the one called, since
``register`` is a common name that may mean something else there. An entry point may also name the
register function itself. A plugin that fails to import or register is a WARNING naming it and its
error; the others still load. Loading is idempotent per registry (until ``OpRegistry.clear()``).
"""

from __future__ import annotations

import importlib
import weakref
from importlib import metadata
from typing import Any, Sequence

from .logger_manager import get_logger
from .registry import OpRegistry
from .signatures import ImplSignatureError

__all__ = ["ENTRY_POINT_GROUP", "load_plugins", "load_plugin_module", "load_entry_points"]

ENTRY_POINT_GROUP = "vllm_fl.plugin"
logger = get_logger()
# registry -> (its epoch when the plugins were loaded, the labels loaded)
_loaded: "weakref.WeakKeyDictionary[OpRegistry, tuple[int, set[str]]]" = weakref.WeakKeyDictionary()
HOOK_NAMES = ("vllm_fl_register", "register")


def _register_with(obj: Any, registry: OpRegistry, label: str) -> None:
    register = next(
        (fn for fn in (getattr(obj, name, None) for name in HOOK_NAMES) if fn is not None), None
    )
    if register is None and callable(obj) and not isinstance(obj, type(importlib)):
        register = obj
    if not callable(register):
        raise TypeError(
            f"{label} exposes no callable vllm_fl_register(registry) or register(registry)"
        )
    register(registry)


def _run(label: str, registry: OpRegistry, errors: list | None, load) -> bool:
    epoch, done = _loaded.get(registry, (None, set()))
    if epoch != registry.epoch:  # never loaded, or cleared since
        done = set()
        _loaded[registry] = (registry.epoch, done)
    if label in done:
        return True
    try:
        with registry.registering_from(label):
            _register_with(load(), registry, label)
    except ImplSignatureError:  # strict mode: a wrong signature stops here, not at a call
        raise
    except Exception as exc:  # noqa: BLE001 - one broken plugin must not stop the others
        msg = f"{type(exc).__name__}: {exc}"
        logger.warning("Plugin %s failed to load: %s", label, msg, exc_info=True)
        if errors is not None:
            errors.append((label, msg))
        return False
    done.add(label)
    logger.debug("Plugin %s registered", label)
    return True


def load_plugin_module(registry: OpRegistry, module: str, errors: list | None = None) -> bool:
    return _run(f"module '{module}'", registry, errors, lambda: importlib.import_module(module))


def load_entry_points(registry: OpRegistry, errors: list | None = None) -> list[str]:
    try:
        eps = metadata.entry_points(group=ENTRY_POINT_GROUP)
    except Exception as exc:  # noqa: BLE001
        logger.warning("cannot list entry points of group %s: %s", ENTRY_POINT_GROUP, exc)
        return []
    loaded = []
    for ep in sorted(eps, key=lambda e: e.name):
        label = f"entry point '{ep.name}' ({ep.value})"
        if _run(label, registry, errors, ep.load):
            loaded.append(ep.name)
    return loaded


def load_plugins(
    registry: OpRegistry, modules: Sequence[str] = (), errors: list | None = None
) -> None:
    """Entry points first, then ``modules`` (from ``VLLM_FL_PLUGIN_MODULES``) in order."""
    load_entry_points(registry, errors)
    for module in modules:
        load_plugin_module(registry, module, errors)

"""Registration of the built-in backends listed in the generated ``backends.BUILTIN_BACKENDS``."""

from __future__ import annotations

import importlib

from .logger_manager import get_logger
from .registry import OpRegistry

__all__ = ["register_builtins"]

logger = get_logger()


def register_builtins(registry: OpRegistry, errors: list | None = None) -> list[str]:
    """Import ``<pkg>.register_ops`` of every built-in backend and call its ``register``.

    A backend that fails is a WARNING naming it (recorded in ``errors``); the others still load.
    Returns the packages registered.
    """
    try:
        from .backends import BUILTIN_BACKENDS
    except ImportError as exc:
        msg = f"no built-in backends: cannot import vllm_fl.dispatch.backends: {exc}"
        logger.warning("%s", msg)
        if errors is not None:
            errors.append(("vllm_fl.dispatch.backends", msg))
        return []
    done = []
    for pkg in BUILTIN_BACKENDS:
        try:
            importlib.import_module(f"{pkg}.register_ops").register(registry)
        except Exception as exc:  # noqa: BLE001
            msg = f"{type(exc).__name__}: {exc}"
            logger.warning("Built-in backend %s failed to register: %s", pkg, msg, exc_info=True)
            if errors is not None:
                errors.append((pkg, msg))
            continue
        done.append(pkg)
    return done

"""Registration of the built-in backends listed in the generated ``backends.BUILTIN_BACKENDS``."""

from __future__ import annotations

import importlib

from .logger_manager import get_logger
from .registry import BUILT_IN, OpRegistry
from .builtin_backends import BUILTIN_BACKENDS
from .backend import Backend

__all__ = ["register_builtins", "builtin_backend"]

logger = get_logger()


def builtin_backend(package: str) -> Backend:
    """The ``BACKEND`` a built-in backend's package declares (one without hooks if it declares
    none)."""
    declared = getattr(importlib.import_module(package), "BACKEND", None)
    if declared is None:
        return Backend(package.rpartition(".")[2])
    if not isinstance(declared, Backend):
        raise TypeError(f"{package}.BACKEND is {declared!r}, not a Backend")
    return declared


def register_builtins(
    registry: OpRegistry,
    errors: list | None = None,
    packages: tuple[str, ...] | None = None,
) -> list[str]:
    """Import ``<pkg>.register_ops`` of every built-in backend package and call its ``register``
    on behalf of the package's ``BACKEND``.

    A backend that fails is a WARNING naming it (recorded in ``errors``); the others still load.
    ``packages``: the backend packages (default ``BUILTIN_BACKENDS``). Returns those registered.
    """
    done = []
    for pkg in BUILTIN_BACKENDS if packages is None else packages:
        try:
            backend = builtin_backend(pkg)
            register = importlib.import_module(f"{pkg}.register_ops").register
            with registry.registering_for(backend), registry.registering_from(BUILT_IN):
                register(registry)
        except Exception as exc:  # noqa: BLE001
            msg = f"{type(exc).__name__}: {exc}"
            logger.warning("Built-in backend %s failed to register: %s", pkg, msg, exc_info=True)
            if errors is not None:
                errors.append((pkg, msg))
            continue
        done.append(pkg)
    return done

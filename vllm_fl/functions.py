"""Routes vLLM's calls of the functions ops.yaml replaces through the dispatch.

An op with ``function: vllm._custom_ops.topk_softmax`` in ops.yaml appears in the generated
``vllm_fl.ops.FUNCTIONS``. :func:`install` (run where the model runs, next to the layer
registration) replaces that module attribute with the op's dispatch trampoline, the same
function a layer's ``forward_oot`` holds: the selected impl is called with one extra Python frame,
and a policy change re-selects on the next call. vLLM binds some functions by name in other
modules too (``from vllm._custom_ops import x``), so every loaded ``vllm`` module whose attribute
*is* the original function gets the trampoline as well.

:func:`original` is the function vLLM shipped, which backends wrapping vLLM's own kernel call
(calling the module attribute would come back to the dispatch).
"""

from __future__ import annotations

import importlib
import logging
import sys
import threading
from typing import Any, Callable

logger = logging.getLogger("vllm_fl.vllm")

_lock = threading.Lock()
_originals: dict[str, Callable[..., Any]] = {}  # op -> vLLM's function
_installed: dict[str, list[str]] = {}  # op -> "module.attr" sites holding the trampoline


def _functions() -> dict[str, str]:
    from vllm_fl.ops import FUNCTIONS

    return dict(FUNCTIONS)


def _target(op_name: str) -> tuple[str, str]:
    target = _functions().get(op_name)
    if target is None:
        raise KeyError(f"op {op_name!r} replaces no vLLM function (see FUNCTIONS in vllm_fl.ops)")
    module, _, attr = target.partition(":")
    return module, attr


def original(op_name: str) -> Callable[..., Any]:
    """The vLLM function op ``op_name`` replaces, as vLLM defined it (before :func:`install`)."""
    fn = _originals.get(op_name)
    if fn is not None:
        return fn
    module_name, attr = _target(op_name)
    with _lock:
        fn = _originals.get(op_name)
        if fn is None:
            fn = getattr(importlib.import_module(module_name), attr)
            _originals[op_name] = fn
    return fn


def bind(owner: Any, name: str, op_name: str) -> None:
    """Make ``owner.name`` (a module attribute, usually) op ``op_name``'s dispatch trampoline.

    The same installation a layer class gets from ``dispatch_method``, so a policy change keeps
    ``owner.name`` current; calls cost one extra Python frame over the selected impl.
    """
    from vllm_fl.dispatch import dispatch_method

    dispatch_method(op_name).__set_name__(owner, name)


def install(policy=None) -> dict[str, list[str]]:
    """Point every replaced vLLM function at its op's dispatch; idempotent.

    Ops the OOT policy excludes (``VLLM_FL_OOT_BLACKLIST=topk_softmax``, ...) keep vLLM's function.
    Returns op -> the ``module.attr`` sites now holding the dispatch.
    """
    if policy is None:
        from vllm_fl.dispatch import get_policy

        policy = get_policy()
    if not policy.oot_active:
        return {}
    newly: list[str] = []
    for op_name in _functions():
        if op_name in _installed or not policy.oot_allowed(op_name, op_name):
            continue
        vllm_fn = original(op_name)
        module_name, attr = _target(op_name)
        with _lock:
            if op_name in _installed:
                continue
            sites = [(sys.modules[module_name], attr)]
            sites += _name_bound_copies(vllm_fn, skip=module_name)
            for owner, name in sites:
                bind(owner, name, op_name)
            _installed[op_name] = [f"{owner.__name__}.{name}" for owner, name in sites]
        newly.append(f"{module_name}.{attr} -> {op_name}")
    if newly:
        logger.info("vllm_fl: vLLM functions routed through the dispatch: %s", ", ".join(newly))
    return installed()


def _name_bound_copies(fn: Callable[..., Any], skip: str) -> list[tuple[Any, str]]:
    """(module, attribute) of every loaded vLLM module that bound ``fn`` under some name."""
    found = []
    for name, module in list(sys.modules.items()):
        if module is None or name == skip or not (name == "vllm" or name.startswith("vllm.")):
            continue
        for attr, value in list(vars(module).items()):
            if value is fn:
                found.append((module, attr))
    return found


def installed() -> dict[str, list[str]]:
    """op -> the ``module.attr`` sites holding the dispatch in this process (empty before)."""
    return {op: list(sites) for op, sites in _installed.items()}


def _reset_for_tests() -> None:
    """Give vLLM its functions back (tests only)."""
    with _lock:
        for op_name, sites in _installed.items():
            fn = _originals[op_name]
            for site in sites:
                module_name, _, attr = site.rpartition(".")
                setattr(sys.modules[module_name], attr, fn)
        _installed.clear()

"""What vLLM's own code for a layer calls on this platform: a kernel compiled into vLLM, Triton,
or plain PyTorch.

Inferred from the code, not from a table: starting at the method the layer runs here (the
``_forward_method`` vLLM bound for a ``CustomOp``, ``forward`` otherwise, a linear or embedding
layer's quant method), the scan reads each function's source and follows the functions it names
(module globals, and the attributes of the object the method belongs to, also those bound per
instance such as a linear layer's ``_gemm_impl``) through vLLM's modules, up to ``MAX_DEPTH``
calls deep. A call into one of vLLM's compiled libraries (``torch.ops._C``, ``_moe_C``,
``_C_cache_ops``, ``vllm._custom_ops``, vLLM's FlashAttention) makes it ``compiled``; a Triton
kernel ``triton``; neither ``pytorch``. A function vLLM calls through the module attribute the
plugin routed to the dispatch (``vllm._custom_ops.topk_softmax``, ...) is the dispatch's, not a
compiled call. The scan reads both sides of a platform branch, so ``compiled`` means "names a
compiled kernel on some path": the evidence says which function and which call. Where there is
no source to read the answer is ``unknown``.
"""

from __future__ import annotations

import inspect
import sys
from collections import deque
from dataclasses import dataclass
from types import FunctionType, MethodType, ModuleType
from typing import Any, Callable

#: how many calls deep the scan follows vLLM's functions from the layer's method
MAX_DEPTH = 4

#: source text that names a kernel compiled into vLLM (its extension libraries)
COMPILED_MARKERS = (
    "torch.ops._C.",
    "torch.ops._C_cache_ops.",
    "torch.ops._moe_C.",
    "torch.ops._rocm_C.",
    "torch.ops._vllm_fa2_C",
    "torch.ops._vllm_fa3_C",
    "vllm_flash_attn",
)

#: vLLM's module of Python bindings for its compiled kernels
CUSTOM_OPS_MODULE = "vllm._custom_ops"

COMPILED, TRITON, PYTORCH, UNKNOWN = "compiled", "triton", "pytorch", "unknown"


@dataclass(frozen=True)
class VllmCode:
    """``kind`` (``compiled``, ``triton``, ``pytorch``, ``unknown``) and where it was seen."""

    kind: str
    evidence: str = ""

    def __str__(self) -> str:
        return f"{self.kind} ({self.evidence})" if self.evidence else self.kind


def _vllm_module(name: str | None) -> bool:
    return bool(name) and (name == "vllm" or name.startswith("vllm."))  # type: ignore[union-attr]


def _function(obj: Any) -> FunctionType | None:
    obj = inspect.unwrap(obj) if callable(obj) else obj
    if isinstance(obj, MethodType):
        obj = obj.__func__
    return obj if isinstance(obj, FunctionType) else None


def _is_triton_kernel(obj: Any) -> bool:
    return type(obj).__module__.startswith("triton") and hasattr(obj, "fn")


def _dispatched_functions() -> set[str]:
    """``module.attr`` of every vLLM function the plugin routed to the dispatch here."""
    from vllm_fl.functions import installed

    return {site for sites in installed().values() for site in sites}


def _source(fn: FunctionType) -> str | None:
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return None


def _name(fn: FunctionType) -> str:
    return fn.__qualname__


def classify(roots: list[tuple[Callable[..., Any], Any]]) -> VllmCode:
    """The kind of vLLM code reached from ``roots``: (callable, the object its ``self`` names, or
    None), the methods the layer runs."""
    dispatched = _dispatched_functions()
    custom_ops = sys.modules.get(CUSTOM_OPS_MODULE)
    queue: deque[tuple[FunctionType, Any, int]] = deque()
    for root, owner in roots:
        fn = _function(root)
        if fn is not None:
            queue.append((fn, owner, 0))
    if not queue:
        return VllmCode(UNKNOWN, "no Python function to read")
    seen: set[int] = set()
    triton = ""
    read_any = False
    while queue:
        fn, owner, depth = queue.popleft()
        if id(fn.__code__) in seen:
            continue
        seen.add(id(fn.__code__))
        source = _source(fn)
        if source is None:
            continue
        read_any = True
        for marker in COMPILED_MARKERS:
            if marker in source:
                return VllmCode(COMPILED, f"{_name(fn)} names {marker.rstrip('.')}")
        names = fn.__code__.co_names
        for name in names:
            value = fn.__globals__.get(name)
            if value is None and owner is not None:
                value = _attribute(owner, name)
            if isinstance(value, ModuleType):
                if value is custom_ops:
                    called = [
                        attr
                        for attr in names
                        if hasattr(custom_ops, attr)
                        and f"{CUSTOM_OPS_MODULE}.{attr}" not in dispatched
                        and callable(getattr(custom_ops, attr))
                    ]
                    if called:
                        return VllmCode(
                            COMPILED, f"{_name(fn)} names {CUSTOM_OPS_MODULE}.{called[0]}"
                        )
                continue
            if _is_triton_kernel(value):
                triton = triton or f"{_name(fn)} launches {getattr(value.fn, '__name__', name)}"
                continue
            if depth >= MAX_DEPTH:
                continue
            callee = _function(value)
            if callee is not None and _vllm_module(callee.__module__):
                nested_owner = getattr(value, "__self__", None) or (
                    owner if value is not fn.__globals__.get(name) else None
                )
                queue.append((callee, nested_owner, depth + 1))
    if not read_any:
        return VllmCode(UNKNOWN, "no source to read")
    if triton:
        return VllmCode(TRITON, triton)
    return VllmCode(PYTORCH)


def _attribute(owner: Any, name: str) -> Any:
    """``owner.name`` when it is a function or method (not a property: reading one may compute)."""
    static = inspect.getattr_static(owner, name, None)
    if isinstance(static, property) or static is None:
        return None
    try:
        value = getattr(owner, name)
    except Exception:  # noqa: BLE001 - an attribute that cannot be read is not followed
        return None
    return value if callable(value) and not isinstance(value, type) else None

"""vLLM's unquantized linear layers and LM head on the dispatch op ``linear``.

vLLM computes an unquantized linear layer (``UnquantizedLinearMethod.apply``: the QKV, output,
gate/up and down projections of an unquantized model, and the layers a quantized checkpoint
leaves unquantized) and the LM head (``UnquantizedEmbeddingMethod.apply``, which the logits
processor calls) with the GEMM function ``dispatch_unquantized_gemm()`` returns, a function of
``vllm.model_executor.layers.utils`` that ``linear`` and ``vocab_parallel_embedding`` import by
name. vLLM 0.32's linear method asks once, when it is built (its ``_gemm_impl``); 0.24's, and
the LM head's in both, on every call. The answer is ``default_unquantized_gemm``
(``torch.nn.functional.linear``) on CUDA and on every platform without a GEMM of its own, the
plugin's two among them (the CPU platform answers ``is_cpu()`` False there); otherwise a GEMM of
vLLM's for the platform (the CPU's oneDNN or packed-weight kernels, ROCm's skinny GEMMs) or one
the user chose (0.32's ``--linear-backend flashinfer_cutedsl``).

:func:`install` (run where the model is built, before vLLM builds it) puts :func:`dispatcher`'s
function in place of that name in the two modules: it asks vLLM's, and where vLLM's answer is
``default_unquantized_gemm`` it returns this module's adapter instead, ``(layer, x, weight,
bias) -> linear(x, weight, bias)`` (one for linear layers, one for LM heads, so the calls of each
are counted apart: :func:`call_counts`); any other answer stays vLLM's. vLLM's batch-invariant
mode (``VLLM_BATCH_INVARIANT``) takes its own kernel before asking, as it does in vanilla vLLM.

The shipped policies keep vanilla's computation: on CUDA the cuda impl (``F.linear``, cuBLAS) in
eager mode and, under ``torch.compile``, the reference, which Inductor sees as the same
``aten.linear`` vanilla's graph has; on the CPU platform the reference, ``F.linear``, which is
what vLLM gives that platform without the op. ``VLLM_FL_OOT_BLACKLIST=linear`` leaves vLLM's
function in place.
"""

from __future__ import annotations

import importlib
import logging
import sys
import threading
from typing import Any, Callable

import torch
from torch.compiler import is_compiling as _is_compiling

from vllm_fl import functions

logger = logging.getLogger("vllm_fl.vllm")

#: the op the adapters call
OP = "linear"
#: where vLLM defines its GEMM functions
UTILS_MODULE = "vllm.model_executor.layers.utils"
#: the name of vLLM's GEMM dispatcher in the modules that import it
DISPATCHER = "dispatch_unquantized_gemm"
#: vLLM's modules whose methods compute with the dispatcher's GEMM -> the site their calls count as
SITES: dict[str, str] = {
    "vllm.model_executor.layers.linear": "linear_layers",
    "vllm.model_executor.layers.vocab_parallel_embedding": "lm_head",
}

# The op's dispatch trampoline as a module attribute (kept current on policy changes).
linear: Callable[..., torch.Tensor] | None = None
functions.bind(sys.modules[__name__], "linear", OP)

_lock = threading.Lock()
_vllm: dict[str, Callable[..., Any]] = {}  # module -> the dispatcher it held before install
_calls: dict[str, int] = dict.fromkeys(SITES.values(), 0)  # site -> eager calls in this process


def linear_layers_gemm(
    layer: torch.nn.Module,
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """vLLM's ``default_unquantized_gemm`` for linear layers, computed by the op."""
    if not _is_compiling():  # a traced call is counted as the compiled graph's, never
        _calls["linear_layers"] += 1
    return linear(x, weight, bias)


def lm_head_gemm(
    layer: torch.nn.Module,
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """vLLM's ``default_unquantized_gemm`` for the LM head, computed by the op."""
    if not _is_compiling():
        _calls["lm_head"] += 1
    return linear(x, weight, bias)


#: site -> its adapter
ADAPTERS: dict[str, Callable[..., torch.Tensor]] = {
    "linear_layers": linear_layers_gemm,
    "lm_head": lm_head_gemm,
}


def dispatcher(module_name: str) -> Callable[..., Callable[..., torch.Tensor]]:
    """The ``dispatch_unquantized_gemm`` that :func:`install` puts in ``module_name``: vLLM's
    answer, with ``default_unquantized_gemm`` replaced by the site's adapter."""
    vllm_dispatch = _vllm[module_name]
    default = importlib.import_module(UTILS_MODULE).default_unquantized_gemm
    adapter = ADAPTERS[SITES[module_name]]

    def dispatch_unquantized_gemm(*args: Any, **kwargs: Any) -> Callable[..., torch.Tensor]:
        gemm = vllm_dispatch(*args, **kwargs)
        return adapter if gemm is default else gemm

    dispatch_unquantized_gemm.__qualname__ = f"vllm_fl.linear.dispatcher({module_name!r})"
    dispatch_unquantized_gemm.vllm_dispatch = vllm_dispatch  # type: ignore[attr-defined]
    return dispatch_unquantized_gemm


def install(policy: Any = None) -> list[str]:
    """Make vLLM's unquantized linear methods and LM head compute through the op; idempotent.
    Leaves vLLM alone where the OOT policy excludes the op (``VLLM_FL_OOT_BLACKLIST=linear``).
    Returns the ``module.dispatch_unquantized_gemm`` sites now holding the plugin's dispatcher.

    Run before vLLM builds the model: vLLM 0.32's linear methods take their GEMM when built."""
    if policy is None:
        from vllm_fl.dispatch import get_policy

        policy = get_policy()
    if not policy.oot_active or not policy.oot_allowed(OP, OP):
        return installed()
    newly = []
    with _lock:
        for module_name in SITES:
            if module_name in _vllm:
                continue
            module = importlib.import_module(module_name)
            _vllm[module_name] = getattr(module, DISPATCHER)
            setattr(module, DISPATCHER, dispatcher(module_name))
            newly.append(f"{module_name}.{DISPATCHER}")
    if newly:
        logger.info(
            "vllm_fl: vLLM's unquantized linear layers and LM head compute through op %s (%s)",
            OP,
            ", ".join(newly),
        )
    return installed()


def installed() -> list[str]:
    """The ``module.dispatch_unquantized_gemm`` sites holding the plugin's dispatcher here."""
    return [
        f"{name}.{DISPATCHER}"
        for name in SITES
        if getattr(getattr(sys.modules.get(name), DISPATCHER, None), "vllm_dispatch", None)
        is not None
    ]


def gemm_ops(layer: Any) -> tuple[str, ...]:
    """The ops computing ``layer``'s GEMM through this module: ``("linear",)`` for an unquantized
    linear layer or LM head whose method takes its GEMM from an adapter here, else ``()`` (an
    input embedding, whose method looks rows up; a quantized layer; a GEMM vLLM or the user
    chose)."""
    method = getattr(layer, "quant_method", None)
    if method is None:
        return ()
    site = _site(layer, method)
    if site is None:
        return ()
    gemm = getattr(method, "_gemm_impl", None)  # vLLM 0.32's linear method: chosen when built
    if gemm is None:
        module = sys.modules.get(_vllm_class(type(method)).__module__)
        dispatch = getattr(module, DISPATCHER, None)
        if getattr(dispatch, "vllm_dispatch", None) is None:
            return ()
        gemm = dispatch()
    return (OP,) if gemm is ADAPTERS[site] else ()


def _site(layer: Any, method: Any) -> str | None:
    """Which adapter's site ``layer``'s calls are (None: none of the two)."""
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod
    from vllm.model_executor.layers.vocab_parallel_embedding import (
        ParallelLMHead,
        UnquantizedEmbeddingMethod,
    )

    if isinstance(method, UnquantizedLinearMethod):
        return "linear_layers"
    if isinstance(method, UnquantizedEmbeddingMethod) and isinstance(layer, ParallelLMHead):
        return "lm_head"
    return None


def _vllm_class(cls: type) -> type:
    return next((c for c in cls.__mro__ if c.__module__.startswith("vllm.")), cls)


def call_counts() -> dict[str, int]:
    """site (``linear_layers``, ``lm_head``) -> the eager calls its adapter made through the op in
    this process (calls traced by ``torch.compile`` run in the compiled graph, uncounted)."""
    return dict(_calls)


def _reset_for_tests() -> None:
    """Give vLLM its dispatchers back and forget the counts (tests only)."""
    with _lock:
        for module_name, fn in _vllm.items():
            module = sys.modules.get(module_name)
            if module is not None:
                setattr(module, DISPATCHER, fn)
        _vllm.clear()
        for site in _calls:
            _calls[site] = 0

"""Quantized MoE layers on the dispatch: vLLM's MoE oracles pick the plugin's experts first.

vLLM's FP8, INT8 and WNA16 MoE methods keep their weight loading and ask an oracle
(``vllm.model_executor.layers.fused_moe.oracle.{fp8,int8,int_wna16}``) for an experts class of
vLLM's modular kernel, by platform: on ``PlatformFL`` (``is_cuda()``) vLLM's CUDA choice
(DeepGEMM, Triton, CUTLASS, FlashInfer experts), on ``PlatformFLCpu`` nothing (the FP8 oracle
returns ``NONE`` and the layer fails while loading).

:func:`install_moe_experts`, run where the model is built (``prepare_model_process``), changes two
functions of each oracle module (the selection looks both up as module globals on every call, so
it works whoever imported ``select_*_moe_backend`` by name): ``_get_priority_backends`` puts the
``TRITON`` backend first, and ``backend_to_kernel_cls(TRITON)`` returns
:data:`QuantizedExpertsFL` ahead of vLLM's Triton experts. ``TRITON`` keeps the checkpoint's layout
(no DeepGEMM / Marlin / FlashInfer reshuffle) and vLLM's quant config, which is what the op reads.
A scheme the plugin's class does not support falls through to vLLM's own classes as before. An
explicit ``moe_backend`` (or ``VLLM_USE_DEEP_GEMM=1``) still selects vLLM's choice.

``QuantizedExpertsFL`` (a ``FusedMoEExpertsModular``) computes the routed experts with the op
``fused_experts_quant`` (ops.yaml): it takes the activations unquantised
(``expects_unquantized_inputs``), so their quantisation happens inside the op's selected impl,
and returns the weighted top-k sum itself (``TopKWeightAndReduceNoOP``).

Which vLLM releases: the FP8 and INT8 oracles have a ``TRITON`` backend in 0.24 and 0.32; the
WNA16 oracle only in 0.32 (vLLM 0.24's WNA16 MoE methods call vLLM's functional ``fused_experts``
or Marlin, and are not dispatched).
"""

from __future__ import annotations

import importlib
import logging
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass

import torch
import vllm.model_executor.layers.fused_moe.modular_kernel as mk
from vllm.model_executor.layers.fused_moe.topk_weight_and_reduce import TopKWeightAndReduceNoOP
from vllm.model_executor.layers.quantization.utils import quant_utils

from vllm_fl import functions

logger = logging.getLogger("vllm_fl.vllm")

OP = "fused_experts_quant"

# The op's dispatch trampoline as a module attribute (kept current on policy changes).
fused_experts_quant = None
functions.bind(sys.modules[__name__], "fused_experts_quant", OP)


@dataclass(frozen=True)
class MoeOracle:
    """One of vLLM's MoE kernel oracles: its module, its backend enum, what it quantizes."""

    module: str
    backend_enum: str
    format: str


ORACLES: tuple[MoeOracle, ...] = (
    MoeOracle(
        "vllm.model_executor.layers.fused_moe.oracle.fp8",
        "Fp8MoeBackend",
        "FP8 MoE (block, channel or tensor scales)",
    ),
    MoeOracle(
        "vllm.model_executor.layers.fused_moe.oracle.int8",
        "Int8MoeBackend",
        "INT8 W8A8 MoE",
    ),
    MoeOracle(
        "vllm.model_executor.layers.fused_moe.oracle.int_wna16",
        "WNA16MoEBackend",
        "INT4/INT8 weight-only MoE",
    ),
)

#: (weight, activation) quant keys of ``vllm...quant_utils`` the class takes; names a vLLM release
#: lacks are skipped. Weight-only formats pass no activation key.
SUPPORTED_SCHEMES: tuple[tuple[str, str | None], ...] = (
    ("kFp8Static128BlockSym", "kFp8Dynamic128Sym"),
    ("kFp8StaticChannelSym", "kFp8DynamicTokenSym"),
    ("kFp8StaticTensorSym", "kFp8DynamicTokenSym"),
    ("kFp8StaticTensorSym", "kFp8StaticTensorSym"),
    ("kFp8StaticTensorSym", "kFp8DynamicTensorSym"),
    ("kInt8StaticChannelSym", "kInt8DynamicTokenSym"),
    ("kInt4Static", None),
    ("kInt4StaticAsym", None),
    ("kInt4Static32", None),
    ("kInt4Static32Asym", None),
    ("kInt8Static", None),
)

#: MoE activations the op's reference computes (vLLM's ``MoEActivation`` values)
ACTIVATIONS = ("silu", "gelu", "gelu_tanh")


def quant_type_of(quant_config) -> str | None:
    """The op's ``quant_type`` for vLLM's ``FusedMoEQuantConfig`` (None: not one it computes)."""
    for flag, name in (
        ("use_fp8_w8a8", "fp8_w8a8"),
        ("use_int8_w8a8", "int8_w8a8"),
        ("use_int8_w8a16", "int8_w8a16"),
        ("use_int4_w4a16", "int4_w4a16"),
    ):
        if getattr(quant_config, flag, False):
            return name
    return None


def _activation_name(activation: object) -> str:
    return str(getattr(activation, "value", activation))


_logged: set[tuple] = set()


def _log_format(quant_config) -> None:
    """One INFO line per format the plugin's experts compute in this process."""
    block = getattr(quant_config, "block_shape", None)
    key = (quant_type_of(quant_config), tuple(block) if block else None)
    if key in _logged:
        return
    _logged.add(key)
    logger.info(
        "vllm_fl: quantized MoE experts (%s%s) computed by the op %s",
        key[0],
        f", block {list(key[1])}" if key[1] else "",
        OP,
    )


def _supported_keys() -> frozenset[tuple[object, object]]:
    """The (weight, activation) quant keys of :data:`SUPPORTED_SCHEMES` this vLLM defines."""
    keys = set()
    for weight, activation in SUPPORTED_SCHEMES:
        w = getattr(quant_utils, weight, None)
        a = None if activation is None else getattr(quant_utils, activation, None)
        if w is not None and (activation is None or a is not None):
            keys.add((w, a))
    return frozenset(keys)


_SUPPORTED_KEYS = _supported_keys()


class QuantizedExpertsFL(mk.FusedMoEExpertsModular):
    """vLLM's quantized MoE experts through the dispatch op ``fused_experts_quant``."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _log_format(self.quant_config)

    @staticmethod
    def activation_format():
        return mk.FusedMoEActivationFormat.Standard

    @property
    def expects_unquantized_inputs(self) -> bool:
        # the op's impl quantises the activations (each backend with its own kernels)
        return True

    @staticmethod
    def _supports_current_device() -> bool:
        return True

    @staticmethod
    def _supports_no_act_and_mul() -> bool:
        return False

    @staticmethod
    def _supports_quant_scheme(weight_key, activation_key) -> bool:
        return (weight_key, activation_key) in _SUPPORTED_KEYS

    @staticmethod
    def _supports_activation(activation) -> bool:
        return _activation_name(activation) in ACTIVATIONS

    @staticmethod
    def _supports_parallel_config(moe_parallel_config) -> bool:
        # tokens arrive in the standard layout; all-to-all dispatchers need batched experts
        return not moe_parallel_config.use_all2all_kernels

    def finalize_weight_and_reduce_impl(self):
        return TopKWeightAndReduceNoOP()

    def workspace_shapes(
        self,
        M,
        N,
        K,
        topk,
        global_num_experts,
        local_num_experts,
        expert_tokens_meta,
        activation,
    ):
        # the op allocates what it needs; the output is the reduced [tokens, hidden]
        return (0,), (0,), (M, K)

    def apply(
        self,
        output,
        hidden_states,
        w1,
        w2,
        topk_weights,
        topk_ids,
        activation,
        global_num_experts,
        expert_map,
        a1q_scale,
        a2_scale,
        workspace13,
        workspace2,
        expert_tokens_meta,
        apply_router_weight_on_input,
    ):
        quant = self.quant_config
        if apply_router_weight_on_input:
            # vLLM's prepare step has weighted the input already (top-1 only)
            topk_weights = torch.ones_like(topk_weights)
        block = quant.block_shape or (0, 0)
        output.copy_(
            fused_experts_quant(
                hidden_states,
                w1,
                w2,
                topk_weights,
                topk_ids,
                quant_type_of(quant),
                quant.w1_scale,
                quant.w2_scale,
                quant.a1_scale,
                quant.a2_scale,
                quant.w1_zp,
                quant.w2_zp,
                int(block[0]),
                int(block[1]),
                bool(quant.per_act_token_quant),
                _activation_name(activation),
                bool(apply_router_weight_on_input),
                global_num_experts,
                expert_map,
            )
        )


_lock = threading.Lock()
_originals: dict[str, tuple[Callable, Callable]] = {}  # oracle module -> (priority, kernel_cls)


def _triton_member(oracle: MoeOracle):
    """The oracle's TRITON backend (None where this vLLM has no such oracle or backend)."""
    try:
        module = importlib.import_module(oracle.module)
    except ImportError:
        return None, None
    enum = getattr(module, oracle.backend_enum, None)
    return module, getattr(enum, "TRITON", None)


def _wrap(module, triton, experts_cls: type) -> None:
    priority, kernel_cls = module._get_priority_backends, module.backend_to_kernel_cls

    def _get_priority_backends(*args, **kwargs):
        backends = [b for b in priority(*args, **kwargs) if b is not triton]
        return [triton, *backends]

    def backend_to_kernel_cls(backend):
        found = kernel_cls(backend)
        return [experts_cls, *found] if backend is triton else found

    _get_priority_backends.__wrapped__ = priority
    backend_to_kernel_cls.__wrapped__ = kernel_cls
    module._get_priority_backends = _get_priority_backends
    module.backend_to_kernel_cls = backend_to_kernel_cls
    _originals[module.__name__] = (priority, kernel_cls)


def install_moe_experts(platform=None, policy=None) -> list[str]:
    """On the plugin's platforms, make vLLM's quantized MoE oracles choose
    ``QuantizedExpertsFL`` (TRITON first, the plugin's class ahead of vLLM's); idempotent.
    Returns the formats now dispatched. The OOT policy can leave the op out
    (``VLLM_FL_OOT_BLACKLIST=fused_experts_quant``): vLLM's choice then stays."""
    from vllm_fl.platform import is_plugin_platform

    if platform is None:
        from vllm.platforms import current_platform as platform
    if not is_plugin_platform(platform):
        return []
    if policy is None:
        from vllm_fl.dispatch import get_policy

        policy = get_policy()
    if not policy.oot_allowed(OP):
        return []
    with _lock:
        for oracle in ORACLES:
            module, triton = _triton_member(oracle)
            if triton is None or oracle.module in _originals:
                continue
            _wrap(module, triton, QuantizedExpertsFL)
        return installed()


def installed() -> list[str]:
    """The formats whose oracle this process changed."""
    return [oracle.format for oracle in ORACLES if oracle.module in _originals]


def _reset_for_tests() -> None:
    """Give the oracles their functions back (tests only)."""
    with _lock:
        for name, (priority, kernel_cls) in _originals.items():
            module = sys.modules[name]
            module._get_priority_backends = priority
            module.backend_to_kernel_cls = kernel_cls
        _originals.clear()

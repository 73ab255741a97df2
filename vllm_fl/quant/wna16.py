"""Weight-only W4A16 / W8A16 linear layers on the dispatch (GPTQ, AWQ, compressed-tensors
pack-quantized).

``WNA16KernelFL`` heads the out-of-tree row of ``_POSSIBLE_KERNELS`` (vLLM's mixed-precision
``MPLinearKernel`` table, which every one of these formats chooses from): 4- or 8-bit weights,
symmetric (GPTQ's ``uint4b8`` / ``uint8b128``) or with zero points (``uint4`` / ``uint8``: AWQ,
asymmetric compressed-tensors), group size -1 (channelwise), 32, 64 or 128, through the op
``wna16_gemm``. It keeps the weight layout of vLLM's portable Triton W4A16 kernel, extended to
8 bits (``vllm_fl.kernels.wna16``): the checkpoint's weight, packed along K, is repacked along N
once when the weights are loaded. What it refuses goes to vLLM's next kernel of the row (Marlin,
Machete, ... on ``PlatformFL``): act-order checkpoints (``g_idx``, vLLM 0.24 only), other group
sizes, widths or activation types.

On the plugin's CPU platform (``PlatformFLCpu``: neither ``is_cuda()`` nor ``is_cpu()``), vLLM's
GPTQ and AWQ methods would refuse or miss that table: :func:`install` makes them take it (see
there). ``PlatformFL`` answers ``is_cuda()`` and needs nothing.
"""

from __future__ import annotations

import sys

import torch
from vllm.model_executor.kernels.linear.mixed_precision.triton_w4a16 import (
    TritonW4A16LinearKernel,
)
from vllm.model_executor.layers.quantization.utils import replace_parameter
from vllm.model_executor.parameter import permute_param_layout_

from vllm_fl import functions
from vllm_fl.kernels import wna16 as packing
from vllm_fl.quant.kernels import PluginKernel

# The op's dispatch trampoline as a module attribute (kept current on policy changes).
wna16_gemm = None
functions.bind(sys.modules[__name__], "wna16_gemm", "wna16_gemm")

#: group sizes the kernel takes (-1: one group over K), as Marlin's
GROUP_SIZES = packing.GROUP_SIZES
ACT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def weight_types() -> dict:
    """vLLM's scalar type -> (bits, zero points) of the weights the kernel takes."""
    from vllm.scalar_type import scalar_types

    return {
        scalar_types.uint4b8: (4, False),
        scalar_types.uint8b128: (8, False),
        scalar_types.uint4: (4, True),
        scalar_types.uint8: (8, True),
    }


def supports(
    weight_type, group_size: int, act_type: torch.dtype | None = None, has_g_idx: bool = False
) -> tuple[bool, str | None]:
    """Whether the kernel takes weights of ``weight_type`` in groups of ``group_size`` (and
    activations of ``act_type``, act-order ``has_g_idx``); else the reason."""
    types = weight_types()
    if weight_type not in types:
        return False, f"weight type {weight_type} is not one of {[str(t) for t in types]}"
    if group_size not in GROUP_SIZES:
        return False, f"group size {group_size} is not one of {list(GROUP_SIZES)}"
    if act_type is not None and act_type not in ACT_DTYPES:
        return False, f"activation type {act_type} is not one of {list(ACT_DTYPES)}"
    if has_g_idx:
        return False, "act-order weights (g_idx) are left to vLLM's kernels"
    return True, None


def check_config(c) -> tuple[bool, str | None]:
    """``can_implement`` of ``WNA16KernelFL`` for an ``MPLinearLayerConfig``."""
    ok, why = supports(c.weight_type, c.group_size, c.act_type, getattr(c, "has_g_idx", False))
    if not ok:
        return False, why
    out_type = getattr(c, "out_type", None)
    if out_type is not None and out_type != c.act_type:
        return False, f"output type {out_type} differs from the activation type {c.act_type}"
    bits, _ = weight_types()[c.weight_type]
    factor = packing.pack_factor(bits)
    k, n = c.partition_weight_shape
    if k % factor or n % factor:
        return False, f"weight [K, N] = [{k}, {n}] is not packable: K and N % {factor} != 0"
    if c.group_size != -1 and k % c.group_size:
        return False, f"input features {k} are not a multiple of group size {c.group_size}"
    return True, None


def _replace(layer, name: str, data: torch.Tensor) -> None:
    # a plain Parameter, as vLLM's kernels leave them (TorchDynamo compatibility)
    replace_parameter(layer, name, torch.nn.Parameter(data, requires_grad=False))


class WNA16KernelFL(TritonW4A16LinearKernel):
    """W4A16 / W8A16 through the dispatch (op ``wna16_gemm``); weights in the layout of
    vLLM's Triton W4A16 kernel (``qweight`` [K, N / p] packed along N, ``scales``
    [K / G, N], ``qzeros`` [K / G, N / p] or None), 8-bit weights included."""

    @classmethod
    def get_min_capability(cls) -> int:
        return 0

    @classmethod
    def can_implement(cls, c) -> tuple[bool, str | None]:
        return check_config(c)

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        c = self.config
        bits, zero_points = weight_types()[c.weight_type]
        self.bits = bits

        # GPTQ, AWQ (converted by vLLM's method) and compressed-tensors all pack along K;
        # their parameters say which dimension is which
        w_q = getattr(layer, self.w_q_name)
        permute_param_layout_(w_q, input_dim=0, output_dim=1, packed_dim=0)
        _replace(layer, self.w_q_name, packing.k_packed_to_canonical(w_q.data, bits))

        w_s = getattr(layer, self.w_s_name)
        permute_param_layout_(w_s, input_dim=0, output_dim=1)
        _replace(layer, self.w_s_name, w_s.data.to(c.act_type).contiguous())

        w_zp = getattr(layer, self.w_zp_name or "", None)
        if zero_points:
            permute_param_layout_(w_zp, input_dim=0, output_dim=1, packed_dim=1)
            _replace(layer, self.w_zp_name, w_zp.data.contiguous())
        elif w_zp is not None:
            # GPTQ's symmetric checkpoints ship zero points the kernel never reads
            setattr(layer, self.w_zp_name, None)

    def apply_weights(
        self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        c = self.config
        zeros = getattr(layer, self.w_zp_name) if c.zero_points else None
        return wna16_gemm(
            x,
            getattr(layer, self.w_q_name),
            getattr(layer, self.w_s_name),
            self.bits,
            c.group_size,
            zeros,
            bias,
        )


KERNELS = (
    PluginKernel(
        table="_POSSIBLE_KERNELS",
        kernel=WNA16KernelFL,
        format="W4A16/W8A16 weight-only, GPTQ/AWQ/compressed-tensors (op wna16_gemm)",
    ),
)


# -- vLLM's GPTQ and AWQ methods on the plugin's CPU platform ------------------------------------

_GPTQ = "vllm.model_executor.layers.quantization.auto_gptq"
_AWQ = "vllm.model_executor.layers.quantization.auto_awq"
_originals: dict[tuple[object, str], object] = {}


def verify_supported(quant_type, group_size: int, has_zp: bool = False) -> None:
    """Stands in for vLLM's ``verify_marlin_supported`` in its GPTQ and AWQ methods on the
    plugin's CPU platform: raises ValueError unless ``WNA16KernelFL`` takes the weights."""
    ok, why = supports(quant_type, group_size)
    if ok and weight_types()[quant_type][1] != has_zp:
        ok, why = False, f"weight type {quant_type} with zero points {has_zp}"
    if not ok:
        raise ValueError(f"vllm_fl: WNA16KernelFL does not take these weights: {why}")


def _patch(owner, name: str, value) -> None:
    _originals.setdefault((owner, name), getattr(owner, name))
    setattr(owner, name, value)


def install(platform) -> list[str]:
    """Make vLLM's GPTQ and AWQ linear methods reach the kernel table on a plugin platform that
    is not CUDA (``PlatformFLCpu``); idempotent. Returns what was changed.

    There vLLM's methods ask the platform: GPTQ's and AWQ's Marlin method first call
    ``verify_marlin_supported``, which knows no types for a platform that is neither CUDA nor
    CPU (no compute capability) and raises; AWQ falls back to its ``_C`` GEMM method
    (``AutoAWQLinearMethod``, absent from the CPU build) instead of the method that chooses from
    the table. So the check becomes :func:`verify_supported` and AWQ takes the table's method.
    On ``PlatformFL`` (``is_cuda()``) vLLM's own checks hold and nothing changes."""
    if platform.is_cuda():
        return []
    import importlib

    gptq, awq = importlib.import_module(_GPTQ), importlib.import_module(_AWQ)
    if _originals:
        return _changed()
    _patch(gptq, "verify_marlin_supported", verify_supported)
    _patch(awq, "verify_marlin_supported", verify_supported)
    original = awq.AutoAWQConfig.get_quant_method

    def get_quant_method(self, layer, prefix):
        method = original(self, layer, prefix)
        if type(method) is awq.AutoAWQLinearMethod:
            return awq.AutoAWQMarlinLinearMethod(self)
        return method

    _patch(awq.AutoAWQConfig, "get_quant_method", get_quant_method)
    return _changed()


def _changed() -> list[str]:
    return [f"{getattr(owner, '__name__', owner)}.{name}" for owner, name in _originals]


def _reset_for_tests() -> None:
    """Undo :func:`install` (tests only)."""
    for (owner, name), value in _originals.items():
        setattr(owner, name, value)
    _originals.clear()

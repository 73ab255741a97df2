"""INT8 W8A8 linear layers on the dispatch (compressed-tensors' int-quantized layouts).

``Int8ScaledMMKernelFL`` heads the out-of-tree row of ``_POSSIBLE_INT8_KERNELS``: per-channel or
per-tensor weights, dynamic per-token or static per-tensor activations, symmetric or with a zero
point, through the ops ``scaled_int8_quant`` and ``int8_scaled_mm``. It keeps the weight layout of
vLLM's Triton INT8 kernel (the transposed weight, channel-wise scales, the zero-point term
``azp_adj``).
"""

from __future__ import annotations

import sys

from vllm.model_executor.kernels.linear.scaled_mm.triton import TritonInt8ScaledMMLinearKernel

from vllm_fl import functions
from vllm_fl.quant.kernels import PluginKernel

# The ops' dispatch trampolines as module attributes (kept current on policy changes).
scaled_int8_quant = None
int8_scaled_mm = None
functions.bind(sys.modules[__name__], "scaled_int8_quant", "scaled_int8_quant")
functions.bind(sys.modules[__name__], "int8_scaled_mm", "int8_scaled_mm")


class Int8ScaledMMKernelFL(TritonInt8ScaledMMLinearKernel):
    """INT8 W8A8 through the dispatch: activations quantised by ``scaled_int8_quant``, the GEMM by
    ``int8_scaled_mm``; weights prepared as vLLM's Triton INT8 kernel prepares them (``b`` is the
    transposed int8 weight, ``azp_adj`` its column sums)."""

    @classmethod
    def is_supported(cls, compute_capability: int | None = None) -> tuple[bool, str | None]:
        return True, None

    @classmethod
    def can_implement(cls, c) -> tuple[bool, str | None]:
        return True, None

    def apply_weights(self, layer, x, bias=None):
        w_q, w_s, i_s, i_zp, azp_adj = self._get_layer_params(layer)
        symmetric = azp_adj is None
        x_q, x_s, x_zp = scaled_int8_quant(x, i_s, i_zp, symmetric)
        # A static zero point is folded into azp_adj; a dynamic one is per token.
        azp = x_zp if (azp_adj is not None and i_zp is None) else None
        return int8_scaled_mm(
            x_q, w_q, x_s, w_s, str(x.dtype).removeprefix("torch."), bias, azp_adj, azp
        )


KERNELS = (
    PluginKernel(
        table="_POSSIBLE_INT8_KERNELS",
        kernel=Int8ScaledMMKernelFL,
        format="INT8 W8A8 (ops scaled_int8_quant, int8_scaled_mm)",
    ),
)

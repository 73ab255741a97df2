"""Quantized linear layers on the plugin's platforms: vLLM's kernel tables get an out-of-tree row.

vLLM chooses each quantized GEMM from tables keyed by platform
(``vllm.model_executor.kernels.linear``: ``_POSSIBLE_FP8_KERNELS``, ``_POSSIBLE_INT8_KERNELS``,
``_POSSIBLE_KERNELS`` for weight-only int4/int8, ...) and indexes them with the current platform's
enum. No table has a row for ``PlatformEnum.OOT``, so on the plugin's platforms every quantized
checkpoint would die while the model is built (``KeyError: <PlatformEnum.OOT: 6>`` in vLLM 0.24;
"Failed to find a kernel" in later releases, which read the tables with ``.get``).

:func:`install_linear_kernels`, run where the model is built (``prepare_model_process``), gives
every table without one an out-of-tree row: the plugin's own kernels first (their ``apply``
calls dispatched ops of ops.yaml, so the policy picks FlagGems, a vendor or the reference), then
the row of the platform the plugin's platform stands in for (CUDA for ``PlatformFL``, CPU for
``PlatformFLCpu``), so a format the plugin has no op for keeps vLLM's own kernel choice. A row
already there (another plugin's, through ``register_linear_kernel``) is left alone.

The plugin's kernels (:data:`PLUGIN_KERNELS`):

- ``Int8ScaledMMKernelFL`` (``_POSSIBLE_INT8_KERNELS``): INT8 W8A8 (compressed-tensors'
  int-quantized layouts: per-channel or per-tensor weights, dynamic per-token or static
  per-tensor activations, symmetric or with a zero point), through the ops
  ``scaled_int8_quant`` and ``int8_scaled_mm``. It keeps the weight layout of vLLM's Triton INT8
  kernel (the transposed weight, channel-wise scales, the zero-point term ``azp_adj``).
"""

from __future__ import annotations

import logging
import sys
import threading

from vllm_fl import compat, functions
from vllm_fl.platform import is_plugin_platform

logger = logging.getLogger("vllm_fl.vllm")

# The ops' dispatch trampolines as module attributes (kept current on policy changes).
scaled_int8_quant = None
int8_scaled_mm = None
functions.bind(sys.modules[__name__], "scaled_int8_quant", "scaled_int8_quant")
functions.bind(sys.modules[__name__], "int8_scaled_mm", "int8_scaled_mm")

#: vLLM's kernel table -> the plugin's kernel classes placed at the head of its out-of-tree row.
PLUGIN_KERNELS: dict[str, tuple[str, ...]] = {
    "_POSSIBLE_INT8_KERNELS": ("Int8ScaledMMKernelFL",),
}
#: What the plugin dispatches, for the log line and the docs: table -> format.
DISPATCHED_FORMATS: dict[str, str] = {
    "_POSSIBLE_INT8_KERNELS": "INT8 W8A8 (ops scaled_int8_quant, int8_scaled_mm)",
}

_lock = threading.Lock()
_installed: dict[str, list[str]] = {}  # table -> names of the kernels in its out-of-tree row


def _build_int8_kernel() -> type:
    from vllm.model_executor.kernels.linear.scaled_mm.triton import (
        TritonInt8ScaledMMLinearKernel,
    )

    class Int8ScaledMMKernelFL(TritonInt8ScaledMMLinearKernel):
        """INT8 W8A8 through the dispatch: activations quantised by ``scaled_int8_quant``, the
        GEMM by ``int8_scaled_mm``; weights prepared as vLLM's Triton INT8 kernel prepares them
        (``b`` is the transposed int8 weight, ``azp_adj`` its column sums)."""

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

    Int8ScaledMMKernelFL.__module__ = __name__
    Int8ScaledMMKernelFL.__qualname__ = "Int8ScaledMMKernelFL"
    return Int8ScaledMMKernelFL


__getattr__ = compat.lazy_classes(globals(), {"Int8ScaledMMKernelFL": _build_int8_kernel})


def plugin_kernel(name: str) -> type:
    """The plugin's kernel class `name` (built on first use: its base needs vLLM)."""
    return getattr(sys.modules[__name__], name)


def kernel_tables() -> dict[str, dict]:
    """vLLM's quantized-linear kernel tables by name (the module's ``_POSSIBLE_*KERNELS`` dicts
    keyed by ``PlatformEnum``); which exist depends on the vLLM release."""
    from vllm.model_executor.kernels import linear
    from vllm.platforms import PlatformEnum

    return {
        name: table
        for name, table in vars(linear).items()
        if name.startswith("_POSSIBLE_")
        and name.endswith("KERNELS")
        and isinstance(table, dict)
        and all(isinstance(key, PlatformEnum) for key in table)
    }


def stand_in_enum(platform):
    """The in-tree platform whose kernel choice applies where the plugin has none: CUDA for a
    platform that answers ``is_cuda()`` (``PlatformFL``), else CPU (``PlatformFLCpu``)."""
    from vllm.platforms import PlatformEnum

    return PlatformEnum.CUDA if platform.is_cuda() else PlatformEnum.CPU


def install_linear_kernels(platform=None) -> dict[str, list[str]]:
    """Give every kernel table an out-of-tree row (the plugin's kernels, then the stand-in
    platform's row); idempotent. Returns table -> the kernel names of each row installed.

    Only on the plugin's own platforms: another out-of-tree platform keeps its own rows."""
    from vllm.platforms import PlatformEnum

    if platform is None:
        from vllm.platforms import current_platform as platform
    if not is_plugin_platform(platform):
        return {}
    oot, base = PlatformEnum.OOT, stand_in_enum(platform)
    with _lock:
        for name, table in kernel_tables().items():
            if name in _installed or oot in table:
                continue
            ours = [plugin_kernel(kernel) for kernel in PLUGIN_KERNELS.get(name, ())]
            table[oot] = [*ours, *table.get(base, [])]
            _installed[name] = [k.__name__ for k in table[oot]]
        return dict(_installed)


def log_quantization(vllm_config, platform=None) -> None:
    """One INFO line when the model is quantized: what the plugin dispatches, and that vLLM's own
    kernel choice (for the stand-in platform) applies to the rest."""
    model_config = getattr(vllm_config, "model_config", None)
    method = getattr(model_config, "quantization", None)
    if not method:
        return
    if platform is None:
        from vllm.platforms import current_platform as platform
    stand_in = stand_in_enum(platform).name
    logger.info(
        "vllm_fl: quantization %r: the plugin dispatches %s; other quantized linear and MoE "
        "layers are not dispatched and keep vLLM's kernel choice for %s",
        method,
        "; ".join(DISPATCHED_FORMATS.values()),
        stand_in,
    )


def _reset_for_tests() -> None:
    """Remove the out-of-tree rows this process installed (tests only)."""
    from vllm.platforms import PlatformEnum

    tables = kernel_tables()
    with _lock:
        for name in list(_installed):
            tables.get(name, {}).pop(PlatformEnum.OOT, None)
        _installed.clear()

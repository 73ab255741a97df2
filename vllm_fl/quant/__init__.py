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

The plugin's kernels are declared by one module per format (:data:`FORMAT_MODULES`), each with a
``KERNELS`` tuple of :class:`~vllm_fl.quant.kernels.PluginKernel`; the kernel classes subclass the
vLLM kernel whose weight layout they keep and compute through dispatched ops of ops.yaml.

- ``vllm_fl.quant.int8``: INT8 W8A8 (``Int8ScaledMMKernelFL``).
- ``vllm_fl.quant.wna16``: weight-only W4A16 / W8A16, GPTQ, AWQ, compressed-tensors
  (``WNA16KernelFL``).
- ``vllm_fl.quant.fp8``: FP8 block-quantized (``Fp8BlockScaledMMKernelFL``) and per-tensor /
  per-channel (``Fp8ScaledMMKernelFL``) weights.

A format module may also define ``install(platform) -> list[str]``, run once with the rows, for
what its vLLM methods need on the plugin's platforms besides a row (``wna16``: GPTQ's and AWQ's
methods on the CPU platform; ``fp8``: vLLM's load-time FP8 weight quantisation on the CPU
platform).

Quantized MoE layers choose their experts through vLLM's MoE oracles instead of these tables:
:func:`install_moe_experts` (``vllm_fl.quant.moe``) puts the plugin's experts class, computed by
the op ``fused_experts_quant``, first in the FP8, INT8 and WNA16 oracles.
"""

from __future__ import annotations

import importlib
import logging
import threading

from vllm_fl.platform import is_plugin_platform
from vllm_fl.quant.kernels import PluginKernel

logger = logging.getLogger("vllm_fl.vllm")

#: The format modules, each declaring ``KERNELS`` (in the order their kernels head a table's row).
FORMAT_MODULES: tuple[str, ...] = ("vllm_fl.quant.int8", "vllm_fl.quant.wna16", "vllm_fl.quant.fp8")

_lock = threading.Lock()
_installed: dict[str, list[str]] = {}  # table -> names of the kernels in its out-of-tree row


def plugin_kernels() -> tuple[PluginKernel, ...]:
    """Every kernel the format modules declare, in :data:`FORMAT_MODULES` order."""
    return tuple(
        kernel for module in FORMAT_MODULES for kernel in importlib.import_module(module).KERNELS
    )


def kernels_by_table() -> dict[str, tuple[str, ...]]:
    """vLLM's kernel table -> the names of the plugin's kernels heading its out-of-tree row."""
    tables: dict[str, tuple[str, ...]] = {}
    for kernel in plugin_kernels():
        tables[kernel.table] = (*tables.get(kernel.table, ()), kernel.name)
    return tables


def dispatched_formats() -> list[str]:
    """What the plugin dispatches, one entry per kernel and per MoE oracle this process changed
    (for the log line and the docs)."""
    from vllm_fl.quant import moe

    moe_formats = [f"{name} (op {moe.OP})" for name in moe.installed()]
    return [kernel.format for kernel in plugin_kernels()] + moe_formats


def install_moe_experts(platform=None) -> list[str]:
    """Make vLLM's quantized MoE oracles choose the plugin's experts (``vllm_fl.quant.moe``)."""
    from vllm_fl.quant import moe

    return moe.install_moe_experts(platform)


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
            ours = [k.kernel for k in plugin_kernels() if k.table == name]
            table[oot] = [*ours, *table.get(base, [])]
            _installed[name] = [k.__name__ for k in table[oot]]
        for module in FORMAT_MODULES:
            install = getattr(importlib.import_module(module), "install", None)
            if install is not None:
                install(platform)
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
        "layers keep vLLM's kernel choice for %s",
        method,
        "; ".join(dispatched_formats()),
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
        for module in FORMAT_MODULES:
            reset = getattr(importlib.import_module(module), "_reset_for_tests", None)
            if reset is not None:
                reset()

"""`PlatformFLCpu`: the plugin's CPU host mode, vLLM's `CpuPlatform` with the OOT enum.

vLLM imports this module by the path `vllm_fl.register_platform` hands it (``VLLM_FL_PLATFORM=cpu``).
"""

from __future__ import annotations

import sys

from vllm.platforms import PlatformEnum
from vllm.platforms.cpu import CpuPlatform

from vllm_fl import compat
from vllm_fl.distributed.preflight import check_flagcx
from vllm_fl.platform import (
    COMMUNICATOR_FL,
    CPU_WORKER_FL,
    note_custom_ops_default,
    select_attention_backend,
)


#: vLLM packages whose ``current_platform.is_cpu()`` `PlatformFLCpu` answers True: code the
#: plugin replaces nothing of, whose only alternative to its CPU branch is a Triton kernel (this
#: machine's Triton has no CPU backend). vLLM's mamba package picks its CPU kernels there (the
#: Mamba2 / SSD / causal-conv1d ops at import, the GDN ops of Qwen3-Next when a layer is built,
#: short_conv per call); everything else still sees an out-of-tree platform.
CPU_KERNEL_PACKAGES = ("vllm.model_executor.layers.mamba",)
_CPU_KERNEL_PREFIXES = tuple(p + "." for p in CPU_KERNEL_PACKAGES)


def asks_for_cpu_kernels(module: str) -> bool:
    """Whether vLLM's module ``module`` is one `PlatformFLCpu.is_cpu` answers True
    (``CPU_KERNEL_PACKAGES`` and their submodules)."""
    return module in CPU_KERNEL_PACKAGES or module.startswith(_CPU_KERNEL_PREFIXES)


class PlatformFLCpu(CpuPlatform):
    """vLLM's CPU platform, out of tree (`CustomOp` calls `forward_oot`), batching as vLLM's own
    CPU platform does; the worker is `vllm_fl.worker.cpu.CPUWorkerFL`.

    `is_cpu()` is True only for the code of ``CPU_KERNEL_PACKAGES`` (see `is_cpu`)."""

    _enum = PlatformEnum.OOT

    def is_cpu(self) -> bool:
        """True when the caller is in ``CPU_KERNEL_PACKAGES``, else False.

        Everywhere else vLLM must see an out-of-tree platform: `CustomOp` would pick
        ``forward_cpu`` over the plugin's ``forward_oot``, vLLM's MoE router would stop calling
        ``topk_softmax`` and its MoE oracle would bypass the plugin's method. In vLLM's mamba
        package the question only chooses between its CPU kernels and Triton ones, and a plugin
        platform answering False there sent Mamba2, Falcon-H1, Nemotron-H and Qwen3-Next to
        Triton, which cannot run here (Qwen3-Next's gated-delta-net layer is in that package
        too: ``mamba.gdn``). Asked once per import or layer, never per token."""
        if self._enum == PlatformEnum.CPU:  # compat.keep_cpu_batch_defaults' window
            return True
        return asks_for_cpu_kernels(sys._getframe(1).f_globals.get("__name__", ""))

    @classmethod
    def pre_register_and_update(cls, parser=None) -> None:
        # vLLM calls this before it sets its defaults, the first moment it can be patched
        super().pre_register_and_update(parser)
        compat.keep_cpu_batch_defaults(cls)

    @classmethod
    def apply_config_platform_defaults(cls, vllm_config) -> None:
        super().apply_config_platform_defaults(vllm_config)
        note_custom_ops_default(vllm_config.compilation_config)

    @classmethod
    def check_and_update_config(cls, vllm_config) -> None:
        super().check_and_update_config(vllm_config)
        parallel_config = vllm_config.parallel_config
        check_flagcx(parallel_config.world_size)
        if parallel_config.worker_cls in ("auto", compat.CPU_WORKER_CLS):
            parallel_config.worker_cls = CPU_WORKER_FL

    @classmethod
    def get_device_communicator_cls(cls) -> str:
        """The plugin's communicator: collectives through the dispatch (the reference's
        ``torch.distributed`` on the gloo group here, where vLLM's own CPU communicator runs its
        compiled shared-memory all-reduce)."""
        return COMMUNICATOR_FL

    @classmethod
    def get_attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads=None):
        default = super().get_attn_backend_cls(selected_backend, attn_selector_config, num_heads)
        return select_attention_backend(cls, default, selected_backend, attn_selector_config)

"""`PlatformFLCpu`: the plugin's CPU host mode, vLLM's `CpuPlatform` with the OOT enum.

vLLM imports this module by the path `vllm_fl.register_platform` hands it (``VLLM_FL_PLATFORM=cpu``).
"""

from __future__ import annotations

from vllm.platforms import PlatformEnum
from vllm.platforms.cpu import CpuPlatform

from vllm_fl import compat
from vllm_fl.platform import CPU_WORKER_FL, note_custom_ops_default, select_attention_backend


class PlatformFLCpu(CpuPlatform):
    """vLLM's CPU platform, out of tree (`is_cpu()` False, so `CustomOp` calls `forward_oot`),
    batching as vLLM's own CPU platform does; the worker is `vllm_fl.worker.cpu.CPUWorkerFL`."""

    _enum = PlatformEnum.OOT

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
        if parallel_config.worker_cls in ("auto", compat.CPU_WORKER_CLS):
            parallel_config.worker_cls = CPU_WORKER_FL

    @classmethod
    def get_attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads=None):
        default = super().get_attn_backend_cls(selected_backend, attn_selector_config, num_heads)
        return select_attention_backend(cls, default, selected_backend, attn_selector_config)

"""`PlatformFL`: the plugin's platform for NVIDIA GPUs, vLLM's `CudaPlatform` with the OOT enum.

vLLM imports this module by the path `vllm_fl.register_platform` hands it; only vLLM's CUDA build
can (`vllm.platforms.cuda` needs its CUDA extension), so on the CPU build the import fails with
an error that says what to do instead (`vllm_fl.platform.cuda_build_missing`).
"""

from __future__ import annotations

from vllm_fl import compat
from vllm_fl.distributed.preflight import check_flagcx
from vllm_fl.platform import (
    CUDA_COMMUNICATOR_FL,
    GPU_WORKER_FL,
    cuda_build_missing,
    note_custom_ops_default,
    select_attention_backend,
)

_missing = cuda_build_missing()
if _missing is not None:
    raise ImportError(_missing)

from vllm.platforms import PlatformEnum  # noqa: E402 - after the check above
from vllm.platforms.cuda import CudaPlatform  # noqa: E402


class PlatformFL(CudaPlatform):
    """vLLM's CUDA platform, out of tree: vLLM calls the plugin's `forward_oot`, and its own CUDA
    paths stay (`is_cuda()`); the worker is `vllm_fl.worker.gpu.WorkerFL`."""

    _enum = PlatformEnum.OOT

    def is_cuda(self) -> bool:
        return True

    def is_cuda_alike(self) -> bool:
        return True

    def is_sleep_mode_available(self) -> bool:
        return True

    @classmethod
    def apply_config_platform_defaults(cls, vllm_config) -> None:
        super().apply_config_platform_defaults(vllm_config)
        note_custom_ops_default(vllm_config.compilation_config)

    @classmethod
    def check_and_update_config(cls, vllm_config) -> None:
        super().check_and_update_config(vllm_config)
        parallel_config = vllm_config.parallel_config
        check_flagcx(parallel_config.world_size)
        if parallel_config.worker_cls in ("auto", compat.GPU_WORKER_CLS):
            parallel_config.worker_cls = GPU_WORKER_FL

    @classmethod
    def get_device_communicator_cls(cls) -> str:
        """The plugin's communicator: collectives through the dispatch; with the cuda backend
        selected, vLLM's own CUDA communicator runs them."""
        return CUDA_COMMUNICATOR_FL

    @classmethod
    def get_attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads=None):
        default = super().get_attn_backend_cls(selected_backend, attn_selector_config, num_heads)
        return select_attention_backend(cls, default, selected_backend, attn_selector_config)

"""`CPUWorkerFL`: the worker of `vllm_fl.platform.cpu.PlatformFLCpu`, vLLM's CPU worker with a
null memory-pool context plus the plugin's steps (`vllm_fl.worker`)."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

from vllm.v1.worker.cpu_worker import CPUWorker

from vllm_fl.worker import (
    finish_verification,
    log_model_ops,
    reload_following,
    start_verification,
)


def _ensure_workspace_manager() -> None:
    """vLLM's modular MoE kernels take their scratch from the process's workspace manager, which
    vLLM's GPU worker creates and its CPU worker does not; the quantized MoE layers the plugin's
    experts compute (``vllm_fl.quant.moe``) run through those kernels on the CPU platform too."""
    from vllm.v1.worker.workspace import init_workspace_manager, is_workspace_manager_initialized

    if not is_workspace_manager_initialized():
        import torch

        init_workspace_manager(torch.device("cpu"))


class CPUWorkerFL(CPUWorker):
    """vLLM's CPU worker with a null memory-pool context (no sleep-mode allocator on CPU);
    `init_device` also prepares the process for the plugin's layers."""

    def init_device(self) -> None:
        super().init_device()
        from vllm_fl.registration import prepare_model_process

        prepare_model_process(self.vllm_config)
        _ensure_workspace_manager()

    def _maybe_get_memory_pool_context(self, tag: str) -> AbstractContextManager:
        return nullcontext()

    def compile_or_warm_up_model(self):
        result = super().compile_or_warm_up_model()
        start_verification(self)
        return result

    def load_model(self, *args, **kwargs) -> None:
        super().load_model(*args, **kwargs)
        log_model_ops(self.get_model())

    def reload_weights(self, *args, **kwargs) -> None:
        reload_following(self, super().reload_weights, args, kwargs)

    def shutdown(self) -> None:
        finish_verification()
        super().shutdown()

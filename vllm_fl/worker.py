"""Workers of the plugin's platforms: vLLM's own, plus the plugin's step before the model is built.

A worker runs in the process that runs the model (vLLM's engine core, or one process per GPU),
after every general plugin of that process has loaded. Its `init_device` (device set, model not
built yet) calls `vllm_fl.registration.prepare_model_process`: register the generated layer
classes, apply the plugin's `custom_ops` default where the user left vLLM's, resolve every op.
That is why nothing of this happens in vLLM's front-end, which must stay free of CUDA so that vLLM
may fork.

- `WorkerFL` (`vllm_fl.platform.PlatformFL`): vLLM's GPU worker; vLLM's CustomOps the plugin
  does not replace run their CUDA path, as in vanilla vLLM
  (`vllm_fl.platform.route_unreplaced_ops_to_cuda`); after vLLM's own warm-up it
  also lets the selected MoE backend compile its kernel variants (`vllm_fl.moe.warm_up`).
- Both start bring-up mode after vLLM's warm-up where `VLLM_FL_VERIFY` asks for it, and report
  at shutdown (`vllm_fl.verify.process`).
- Both reload weights in place as vLLM does, with the plugin's released weights and derived
  values made to follow (`vllm_fl.reload.reloading`).
- `CPUWorkerFL` (`vllm_fl.platform.PlatformFLCpu`): vLLM's CPU worker with a null memory-pool
  context. vLLM's GPU worker, which the CPU worker extends, wraps weight loading and KV-cache
  allocation in `_maybe_get_memory_pool_context`, which returns a null context only for in-tree
  platforms it recognises (`is_cpu()`, CUDA without cumem, XPU without sleep mode); on an
  out-of-tree platform it would reach for the sleep-mode allocator, which does not exist on CPU.

The classes are built on first access, because each base can only be imported by its own vLLM
build.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

from vllm_fl import compat


def _start_verification(worker) -> None:
    """Bring-up mode (`VLLM_FL_VERIFY`), after vLLM's warm-up: its dummy runs stay unverified."""
    from vllm_fl.dispatch import get_config

    if not get_config().verify:
        return
    from vllm_fl.verify import process

    process.start(worker.get_model(), worker.vllm_config)


def _finish_verification() -> None:
    from vllm_fl.verify import process

    process.finish()


def _reload_weights(worker, reload, args, kwargs) -> None:
    from vllm_fl.reload import reloading

    with reloading(worker.get_model()):
        reload(*args, **kwargs)


def _build_gpu_worker() -> type:
    class WorkerFL(compat.gpu_worker_cls()):
        """vLLM's GPU worker; `init_device` also prepares the process for the plugin's layers,
        `compile_or_warm_up_model` also warms the MoE layers' kernels up."""

        def init_device(self) -> None:
            super().init_device()
            from vllm_fl.platform import route_unreplaced_ops_to_cuda
            from vllm_fl.registration import prepare_model_process

            route_unreplaced_ops_to_cuda()
            prepare_model_process(self.vllm_config)

        def compile_or_warm_up_model(self):
            result = super().compile_or_warm_up_model()
            from vllm_fl import moe

            moe.warm_up(self.get_model(), self.scheduler_config.max_num_batched_tokens)
            _start_verification(self)
            return result

        def reload_weights(self, *args, **kwargs) -> None:
            _reload_weights(self, super().reload_weights, args, kwargs)

        def shutdown(self) -> None:
            _finish_verification()
            super().shutdown()

    return WorkerFL


def _ensure_workspace_manager() -> None:
    """vLLM's modular MoE kernels take their scratch from the process's workspace manager, which
    vLLM's GPU worker creates and its CPU worker does not; the quantized MoE layers the plugin's
    experts compute (``vllm_fl.quant.moe``) run through those kernels on the CPU platform too."""
    from vllm.v1.worker.workspace import init_workspace_manager, is_workspace_manager_initialized

    if not is_workspace_manager_initialized():
        import torch

        init_workspace_manager(torch.device("cpu"))


def _build_cpu_worker() -> type:
    class CPUWorkerFL(compat.cpu_worker_cls()):
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
            _start_verification(self)
            return result

        def reload_weights(self, *args, **kwargs) -> None:
            _reload_weights(self, super().reload_weights, args, kwargs)

        def shutdown(self) -> None:
            _finish_verification()
            super().shutdown()

    return CPUWorkerFL


__getattr__ = compat.lazy_classes(
    globals(), {"WorkerFL": _build_gpu_worker, "CPUWorkerFL": _build_cpu_worker}
)

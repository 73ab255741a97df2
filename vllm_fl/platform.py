"""vLLM platforms of the plugin: out-of-tree (`PlatformEnum.OOT`), so vLLM calls `forward_oot`.

- `PlatformFL`: NVIDIA GPUs. It is vLLM's `CudaPlatform` in everything but its enum, and it
  still answers `is_cuda()` / `is_cuda_alike()` so that vLLM's CUDA paths (NCCL, CUDA graphs,
  the GPU worker and its allocator) stay as they are. The attention backend comes from the
  dispatch op `attention_backend` unless the user chose one.
- `PlatformFLCpu`: the CPU host mode, so the whole plugin runs inside vLLM's CPU build with the
  reference backend (developers without an accelerator, CI). vLLM's `CpuPlatform` with the
  OOT enum (so `is_cpu()` is False: `CustomOp` would otherwise pick `forward_cpu`) and
  `vllm_fl.worker.CPUWorkerFL`, whose memory-pool context is a null context.

Both keep the replaced layers enabled when vLLM compiles with Inductor (which defaults
`compilation_config.custom_ops` to "none" and would bypass `forward_oot`), and honour a user's
explicit "-rms_norm" / "-RMSNorm".

The classes are built on first access (`vllm_fl.platform.PlatformFL`), because each base can
only be imported by its own vLLM build: `vllm.platforms.cuda` needs the CUDA extension.
"""

from __future__ import annotations

import logging

from vllm_fl import compat

logger = logging.getLogger("vllm_fl.vllm")

CPU_WORKER_FL = "vllm_fl.worker.CPUWorkerFL"


def keep_custom_ops_enabled(compilation_config, replaced: dict[str, type]) -> list[str]:
    """Make `compilation_config.custom_ops` enable every replaced class; return what it added.

    `replaced` maps the in-tree class name to the in-tree class. A registered OOT class is
    enabled by its in-tree class name ("+RMSNorm", see vllm_fl.compat); a user's "-rms_norm"
    (vLLM's op name) or "-RMSNorm" disables it and is kept.
    """
    from vllm_fl.registration import op_name_of

    custom_ops = compilation_config.custom_ops
    added: list[str] = []
    for in_tree_name, in_tree_cls in replaced.items():
        op_name = op_name_of(in_tree_cls)
        if f"-{in_tree_name}" in custom_ops or f"+{in_tree_name}" in custom_ops:
            continue
        entry = f"-{in_tree_name}" if op_name and f"-{op_name}" in custom_ops else None
        if entry is None and "none" in custom_ops:
            entry = f"+{in_tree_name}"
        if entry is not None:
            custom_ops.append(entry)
            added.append(entry)
    return added


def _update_config(vllm_config) -> None:
    """What both platforms do after vLLM's own check_and_update_config."""
    from vllm_fl.registration import register_oot_classes

    registered = register_oot_classes()
    replaced = {}
    for in_tree_name, target in registered.items():
        ours = compat.oot_registry()[in_tree_name]
        replaced[in_tree_name] = next(c for c in ours.__mro__[1:] if c.__name__ == in_tree_name)
    added = keep_custom_ops_enabled(vllm_config.compilation_config, replaced)
    if added:
        logger.info("vllm_fl: compilation_config.custom_ops += %s", added)


def _build_cuda_platform() -> type:
    base = compat.cuda_platform_cls()

    class PlatformFL(base):
        _enum = compat.platform_enum_oot()

        def is_cuda(self) -> bool:
            return True

        def is_cuda_alike(self) -> bool:
            return True

        def is_sleep_mode_available(self) -> bool:
            return True

        @classmethod
        def check_and_update_config(cls, vllm_config) -> None:
            super().check_and_update_config(vllm_config)
            _update_config(vllm_config)

        @classmethod
        def get_attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads=None):
            default = super().get_attn_backend_cls(
                selected_backend, attn_selector_config, num_heads
            )
            if selected_backend is not None:
                return default  # the user chose one
            from vllm_fl.dispatch import DispatchError, call_op

            try:
                path = call_op("attention_backend", use_mla=bool(attn_selector_config.use_mla))
            except DispatchError as exc:
                logger.warning("vllm_fl: %s; using vLLM's attention backend %s", exc, default)
                return default
            if path and path != default:
                logger.info("vllm_fl: attention backend %s (vLLM would use %s)", path, default)
            return path or default

    PlatformFL.__module__ = __name__
    PlatformFL.__qualname__ = "PlatformFL"
    return PlatformFL


def _build_cpu_platform() -> type:
    base = compat.cpu_platform_cls()

    class PlatformFLCpu(base):
        _enum = compat.platform_enum_oot()

        @classmethod
        def check_and_update_config(cls, vllm_config) -> None:
            super().check_and_update_config(vllm_config)
            parallel_config = vllm_config.parallel_config
            if parallel_config.worker_cls in ("auto", compat.CPU_WORKER_CLS):
                parallel_config.worker_cls = CPU_WORKER_FL
            _update_config(vllm_config)

    PlatformFLCpu.__module__ = __name__
    PlatformFLCpu.__qualname__ = "PlatformFLCpu"
    return PlatformFLCpu


_BUILDERS = {"PlatformFL": _build_cuda_platform, "PlatformFLCpu": _build_cpu_platform}


def __getattr__(name: str) -> type:
    builder = _BUILDERS.get(name)
    if builder is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    cls = builder()
    globals()[name] = cls
    return cls

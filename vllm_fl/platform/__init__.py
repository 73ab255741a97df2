"""vLLM platforms of the plugin: out-of-tree (`PlatformEnum.OOT`), so vLLM calls `forward_oot`.

- `vllm_fl.platform.cuda.PlatformFL`: NVIDIA GPUs. It is vLLM's `CudaPlatform` in everything but
  its enum, and it still answers `is_cuda()` / `is_cuda_alike()` so that vLLM's CUDA paths (NCCL,
  CUDA graphs, the GPU worker and its allocator) stay as they are. Its worker is
  `vllm_fl.worker.gpu.WorkerFL`, vLLM's GPU worker plus the plugin's model-process step.
- `vllm_fl.platform.cpu.PlatformFLCpu`: the CPU host mode, so the whole plugin runs inside vLLM's
  CPU build with the reference backend (developers without an accelerator, CI). vLLM's
  `CpuPlatform` with the OOT enum (so `is_cpu()` is False: `CustomOp` would otherwise pick
  `forward_cpu`; True only to vLLM's mamba package, which otherwise takes Triton kernels) and
  `vllm_fl.worker.cpu.CPUWorkerFL`, whose memory-pool context is a null context.

Each class sits at the top of its own module, which vLLM imports by the path `register_platform`
hands it, because each base can only be imported by its own vLLM build (`vllm.platforms.cuda`
needs the CUDA extension). This package holds what both share, and imports vLLM only inside its
functions.

On both, the attention backend comes from the dispatch op `attention_backend`
(`select_attention_backend`) unless the user chose one or the op's backend cannot run the layer:
on the CPU the reference impl names the plugin's backend (`vllm_fl.attention`), whose cache write
and attention then run on the reference too.

Building the configuration (`apply_config_platform_defaults`, `check_and_update_config`) happens
in vLLM's front-end too, so it only notes what the user asked for and picks the worker: it imports
no layer class and no kernel library and touches no device.

`compilation_config.custom_ops` keeps vLLM's meaning whenever the user set it (`none`,
`none,+rms_norm`, `-silu_and_mul`, ...). Only where it was left at vLLM's default, which is
`none` when Inductor compiles (so `forward_oot` would never run), does the plugin enable the
layers it replaced (`+rms_norm`, ...; the dispatch's `compile_prefer` then picks what Inductor
traces). That happens in the process that builds the model (`apply_custom_ops_default`) and is
logged once.
"""

from __future__ import annotations

import logging

from vllm_fl import compat

logger = logging.getLogger("vllm_fl.vllm")

CPU_WORKER_FL = "vllm_fl.worker.cpu.CPUWorkerFL"
GPU_WORKER_FL = "vllm_fl.worker.gpu.WorkerFL"
#: the device communicators the platforms hand vLLM: collectives through the dispatch
COMMUNICATOR_FL = "vllm_fl.distributed.communicator.CommunicatorFL"
CUDA_COMMUNICATOR_FL = "vllm_fl.distributed.cuda.CudaCommunicatorFL"

# Set on the CompilationConfig (it travels with the VllmConfig to the engine core and workers)
# when the user left custom_ops at vLLM's default.
CUSTOM_OPS_DEFAULT_ATTR = "_vllm_fl_custom_ops_default"
_default_logged = False


def is_plugin_platform(platform) -> bool:
    """Whether ``platform`` is one of the plugin's own platforms (``PlatformFL``,
    ``PlatformFLCpu``: a class of this package), whose workers prepare the model process; another
    out-of-tree platform is not."""
    module = type(platform).__module__
    return module == __name__ or module.startswith(__name__ + ".")


def note_custom_ops_default(compilation_config) -> bool:
    """Record whether `custom_ops` is still as vLLM defaults it (empty: the user gave no entry).
    Runs in `apply_config_platform_defaults`, before vLLM appends its base mode."""
    default = not compilation_config.custom_ops
    setattr(compilation_config, CUSTOM_OPS_DEFAULT_ATTR, default)
    return default


def apply_custom_ops_default(compilation_config, op_names: list[str]) -> list[str]:
    """Enable the replaced layers' ops where vLLM's default would bypass them; return the entries
    added (none unless the user left `custom_ops` at vLLM's default and that default is `none`).

    `op_names` are vLLM's op names of the in-tree classes replaced (`rms_norm`, ...).
    """
    global _default_logged
    custom_ops = compilation_config.custom_ops
    if not getattr(compilation_config, CUSTOM_OPS_DEFAULT_ATTR, False):
        return []
    added: list[str] = []
    if "none" in custom_ops:
        for op in op_names:
            if op and f"+{op}" not in custom_ops and f"-{op}" not in custom_ops:
                custom_ops.append(f"+{op}")
                added.append(f"+{op}")
    if not _default_logged:
        _default_logged = True
        if added:
            logger.info(
                "vllm_fl: compilation_config.custom_ops was left at vLLM's default ('none' "
                "under Inductor): the plugin enables its layers, custom_ops += %s (set "
                "custom_ops yourself to keep vLLM's meaning)",
                added,
            )
        else:
            logger.info(
                "vllm_fl: compilation_config.custom_ops was left at vLLM's default (%s): the "
                "replaced layers are enabled by it",
                custom_ops,
            )
    return added


_FORWARD_OOT_ATTR = "_vllm_fl_stand_in_forward"


def route_unreplaced_ops_to_cuda(policy=None) -> bool:
    """Make vLLM's CustomOps that the plugin does not replace run their CUDA path on `PlatformFL`.

    On an out-of-tree platform vLLM calls `forward_oot`, whose default is `forward_native`: plain
    PyTorch where vanilla vLLM on the same GPU runs its kernel (`QuantFP8`'s
    `per_token_group_fp8_quant`, ...). `PlatformFL` is vLLM's CUDA platform in everything but
    its enum, so the default becomes `forward_cuda`; the classes the plugin registers define
    their own `forward_oot`. Not where the policy denies the cuda vendor: vLLM's CUDA kernels are
    then what the user asked not to run, and `forward_native` stays. Runs where the model is
    built; idempotent. Returns True when it changed the default.
    """
    base = compat.custom_op_base()
    if getattr(base, _FORWARD_OOT_ATTR, False):
        return False
    if policy is None:
        from vllm_fl.dispatch import get_policy

        policy = get_policy()
    if "cuda" in policy.deny_vendors or (
        policy.allow_vendors is not None and "cuda" not in policy.allow_vendors
    ):
        return False

    def forward_oot(self, *args, **kwargs):
        return self.forward_cuda(*args, **kwargs)

    base.forward_oot = forward_oot
    setattr(base, _FORWARD_OOT_ATTR, True)
    return True


def select_attention_backend(
    platform: type, default: str, selected_backend, attn_selector_config
) -> str:
    """The attention backend class path the plugin's platforms give vLLM for a layer.

    ``default`` is what vLLM's own platform class chose; it stays where the user chose a
    backend, where the dispatch op ``attention_backend`` fails or returns an empty string, and
    where the op's backend cannot run the layer (its ``validate_configuration`` names why, as
    vLLM's own selection asks it: an FP8 KV cache, MLA, a dtype, ...). Runs where the model is
    built.
    """
    if selected_backend is not None:
        return default  # the user chose one
    from vllm_fl.dispatch import DispatchError, call_op

    try:
        path = call_op("attention_backend", use_mla=bool(attn_selector_config.use_mla))
    except DispatchError as exc:
        logger.warning("vllm_fl: %s; using vLLM's attention backend %s", exc, default)
        return default
    if not path or path == default:
        return default
    reasons = _attention_backend_refusals(platform, path, attn_selector_config)
    if reasons:
        logger.warning(
            "vllm_fl: attention backend %s cannot run this layer (%s); using vLLM's %s",
            path,
            "; ".join(reasons),
            default,
        )
        return default
    logger.info("vllm_fl: attention backend %s (vLLM would use %s)", path, default)
    return path


def _attention_backend_refusals(platform: type, path: str, attn_selector_config) -> list[str]:
    """Why the backend class at ``path`` cannot run a layer of ``attn_selector_config`` (empty:
    it can), as the backend's ``validate_configuration`` says."""
    import importlib

    module, _, name = path.rpartition(".")
    try:
        backend = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        return [f"cannot import it: {exc}"]
    return list(
        backend.validate_configuration(
            device_capability=platform.get_device_capability(),
            **attn_selector_config._asdict(),
        )
    )


def cuda_build_missing() -> str | None:
    """Why the plugin's CUDA platform cannot be built with the installed vLLM, or None.

    vLLM's CPU build has no CUDA platform: `vllm.platforms.cuda` needs its CUDA extension, and
    without this check the user would see `No module named 'vllm._C_stable_libtorch'`."""
    if not compat.is_cpu_build():
        return None
    from vllm_fl.dispatch import env_text

    asked = env_text("VLLM_FL_PLATFORM") or ""
    what = (
        f"VLLM_FL_PLATFORM={asked} asks for"
        if asked.lower() == "cuda"
        else "vllm_fl.platform.cuda.PlatformFL is"
    )
    return (
        f"vllm_fl: {what} the plugin's CUDA platform, but the installed vLLM is its CPU build "
        f"(vLLM {compat.vllm_version()}), which has no CUDA platform (vllm.platforms.cuda needs vLLM's "
        "CUDA extension). Set VLLM_FL_PLATFORM=cpu for the plugin's CPU host mode, unset it to "
        "keep vLLM's own CPU platform, or install vLLM's CUDA build on a machine with an NVIDIA "
        "GPU."
    )

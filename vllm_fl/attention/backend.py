"""``AttentionBackendFL``: vLLM's Triton attention backend whose impl runs on the dispatch.

What it keeps of vLLM's ``TritonAttentionBackend``: the metadata builder (portable: it builds
tensors vLLM already has, no kernel library), the KV-cache layout and block sizes, CUDA-graph
support (withdrawn where the reference runs the ops: it reads lengths on the host). What it
changes: the impl (``AttentionImplFL``), whose ``do_kv_cache_update`` calls the
op ``reshape_and_cache_flash`` and whose ``forward`` calls ``paged_attention``; its name for
vLLM's backend enum (``CUSTOM``, vLLM's name for an out-of-tree backend); and what it claims to
support: decoder attention (causal or not) with GQA, sliding windows, soft-capped logits and
sinks, a KV cache in the model's dtype. FP8 KV caches, ALiBi, multimodal prefix ranges,
chunked local attention, R-SWA, encoder attention and fused output quantisation are refused by
``validate_configuration`` (so the platform keeps vLLM's backend) or, for what vLLM does not
validate, by the impl's constructor with an error that names them.
"""

from __future__ import annotations

import sys
from typing import ClassVar

import torch
from vllm.v1.attention.backend import AttentionCGSupport, AttentionImpl, AttentionType
from vllm.v1.attention.backends.triton_attn import (
    TritonAttentionBackend,
    TritonAttentionMetadataBuilder,
)

from vllm_fl import compat, functions

# The ops' dispatch trampolines as module attributes (kept current on policy changes): a call
# costs one frame over the selected impl.
paged_attention = None
reshape_and_cache_flash = None
functions.bind(sys.modules[__name__], "paged_attention", "paged_attention")
functions.bind(sys.modules[__name__], "reshape_and_cache_flash", "reshape_and_cache_flash")

#: the extra constructor arguments vLLM may pass, with the value that asks for nothing
_NEUTRAL_EXTRAS = {"use_alibi_sqrt": False, "chunk_lookback": -1}
#: the dispatched ops the backend runs
OPS = ("reshape_and_cache_flash", "paged_attention")


class AttentionMetadataBuilderFL(TritonAttentionMetadataBuilder):
    """vLLM's Triton metadata builder, whose CUDA-graph support holds only where the selected
    kernels can be captured: the reference reads the sequence lengths on the host, so with it
    vLLM keeps attention out of CUDA graphs (piecewise graphs run it eagerly)."""

    @classmethod
    def get_cudagraph_support(cls, vllm_config, kv_cache_spec) -> AttentionCGSupport:
        if _reference_selected():
            return AttentionCGSupport.NEVER
        return super().get_cudagraph_support(vllm_config, kv_cache_spec)


def _reference_selected() -> bool:
    """Whether the dispatch runs either op on the reference (or on nothing yet known)."""
    from vllm_fl.dispatch import BackendImplKind, DispatchError, get_default_manager

    manager = get_default_manager()
    try:
        kinds = [manager.resolve_candidates(op)[0].kind for op in OPS]
    except DispatchError:
        return True
    return BackendImplKind.REFERENCE in kinds


class AttentionBackendFL(TritonAttentionBackend):
    """vLLM's Triton backend with the plugin's impl (see the module docstring)."""

    supported_kv_cache_dtypes: ClassVar[list[str]] = ["auto", "float16", "bfloat16"]

    @staticmethod
    def get_name() -> str:
        return "CUSTOM"

    @staticmethod
    def get_impl_cls() -> type[AttentionImplFL]:
        return AttentionImplFL

    @staticmethod
    def get_builder_cls() -> type[AttentionMetadataBuilderFL]:
        return AttentionMetadataBuilderFL

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type == AttentionType.DECODER

    @classmethod
    def supports_mm_prefix(cls) -> bool:
        return False

    @classmethod
    def supports_alibi_sqrt(cls) -> bool:
        return False

    @classmethod
    def supports_rswa(cls) -> bool:
        return False

    @classmethod
    def supports_batch_invariance(cls) -> bool:
        return False

    @classmethod
    def supports_combination(
        cls,
        head_size: int,
        dtype: torch.dtype,
        kv_cache_dtype: str | None,
        block_size: int | None,
        use_mla: bool,
        has_sink: bool,
        use_sparse: bool,
        use_mm_prefix: bool,
        device_capability: object,
    ) -> str | None:
        if kv_cache_dtype in (None, "auto") or kv_cache_dtype not in cls.supported_kv_cache_dtypes:
            return None  # the model's dtype, or one supports_kv_cache_dtype already refuses
        if getattr(torch, kv_cache_dtype) == dtype:
            return None
        return f"a {kv_cache_dtype} KV cache under {dtype} activations (it holds the keys' dtype)"


class AttentionImplFL(AttentionImpl):
    """Writes the KV cache with ``reshape_and_cache_flash`` and attends with
    ``paged_attention``, both through the dispatch."""

    def __init__(
        self,
        num_heads: int,
        head_size: int,
        scale: float,
        num_kv_heads: int,
        alibi_slopes: list[float] | None,
        sliding_window: int | None,
        kv_cache_dtype: str,
        logits_soft_cap: float | None = None,
        attn_type: str = AttentionType.DECODER,
        kv_sharing_target_layer_name: str | None = None,
        sinks: torch.Tensor | None = None,
        **extras: object,
    ) -> None:
        _refuse_unsupported(alibi_slopes, kv_cache_dtype, attn_type, extras)
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads
        self.num_queries_per_kv = num_heads // num_kv_heads
        self.alibi_slopes = None
        self.sliding_window = sliding_window
        #: how many positions before its own a query sees (vLLM's window counts the query)
        self.window_left = -1 if sliding_window is None else sliding_window - 1
        self.kv_cache_dtype = kv_cache_dtype
        self.logits_soft_cap = float(logits_soft_cap or 0.0)
        self.attn_type = attn_type
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name
        if sinks is not None and sinks.shape[0] != num_heads:
            raise ValueError(
                f"vllm_fl attention: {sinks.shape[0]} sinks for {num_heads} heads; expected one "
                "sink per head"
            )
        self.sinks = sinks

    def forward(
        self,
        layer: torch.nn.Module,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        attn_metadata,
        output: torch.Tensor,
        output_scale: torch.Tensor | None = None,
        output_block_scale: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Attention of the step's queries [tokens, heads, head_size] over the KV cache (the
        step's own keys and values are already in it: vLLM calls ``do_kv_cache_update``
        first), into ``output``."""
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError(
                "vllm_fl attention: fused output quantisation (output_scale) is not supported"
            )
        if attn_metadata is None:  # vLLM's profiling run
            return output.fill_(0)
        causal = attn_metadata.causal
        if isinstance(causal, torch.Tensor):
            raise NotImplementedError("vllm_fl attention: per-sequence causal masks")
        tokens = attn_metadata.num_actual_tokens
        key_cache, value_cache = compat.split_kv_cache(kv_cache, self.head_size)
        paged_attention(
            query[:tokens],
            key_cache,
            value_cache,
            output[:tokens],
            attn_metadata.block_table,
            attn_metadata.seq_lens,
            attn_metadata.query_start_loc,
            attn_metadata.max_query_len,
            attn_metadata.max_seq_len,
            self.scale,
            bool(causal),
            self.window_left,
            self.logits_soft_cap,
            self.sinks,
        )
        return output

    def do_kv_cache_update(
        self,
        layer: torch.nn.Module,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> None:
        """The step's keys and values [tokens, kv_heads, head_size] into their slots (vLLM pads
        key and value, not slot_mapping: the op stores len(slot_mapping) tokens)."""
        key_cache, value_cache = compat.split_kv_cache(kv_cache, self.head_size)
        reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping)


def _refuse_unsupported(
    alibi_slopes: list[float] | None,
    kv_cache_dtype: str,
    attn_type: str,
    extras: dict[str, object],
) -> None:
    """What vLLM may ask of a backend without validating it first: a clear error naming it."""
    refused = []
    if alibi_slopes is not None:
        refused.append("ALiBi slopes")
    if kv_cache_dtype not in AttentionBackendFL.supported_kv_cache_dtypes:
        refused.append(
            f"kv_cache_dtype {kv_cache_dtype!r} (supported: "
            f"{', '.join(AttentionBackendFL.supported_kv_cache_dtypes)})"
        )
    if attn_type != AttentionType.DECODER:
        refused.append(f"attention type {attn_type!r} (supported: decoder)")
    for name, value in extras.items():
        if name not in _NEUTRAL_EXTRAS:
            refused.append(f"the argument {name}={value!r}")
        elif value != _NEUTRAL_EXTRAS[name]:
            refused.append(f"{name}={value!r}")
    if refused:
        raise NotImplementedError(
            "vllm_fl attention backend (AttentionBackendFL) does not support "
            + "; ".join(refused)
            + ". Choose another backend with --attention-backend."
        )

"""``AttentionBackendFL``: vLLM's Triton attention backend whose impl runs on the dispatch.

What it keeps of vLLM's ``TritonAttentionBackend``: the metadata builder (portable: it builds
tensors vLLM already has, no kernel library), the KV-cache layout and block sizes, CUDA-graph
support (withdrawn where the reference runs the ops: it reads lengths on the host). What it
changes: the impl (``AttentionImplFL``) and its name for vLLM's backend enum (``CUSTOM``, vLLM's
name for an out-of-tree backend).

Attention types (``supports_attn_type``):

- decoder attention (causal or not): ``do_kv_cache_update`` calls the op
  ``reshape_and_cache_flash`` and ``forward`` calls ``paged_attention`` over the cache;
- encoder-only attention (vLLM's ``EncoderOnlyAttention``: BERT, ModernBERT, ... embedding and
  classification models): such a layer has no KV cache, so ``do_kv_cache_update`` writes
  nothing and ``forward`` calls ``varlen_attention`` on the step's own queries, keys and values,
  each sequence (``query_start_loc``) within itself, causal as the metadata says (vLLM's
  encoder-only builder sets it false);
- encoder attention of encoder-decoder models and their cross-attention are refused.

Both take GQA, sliding windows (an encoder-only layer's reaches both ways, as in vLLM's
backends) and soft-capped logits, decoder attention also sinks, with a KV cache in the model's
dtype. FP8 KV caches, ALiBi, multimodal prefix ranges, chunked local attention, R-SWA, sinks of
encoder-only layers and fused output quantisation are refused by ``validate_configuration`` (so
the platform keeps vLLM's backend) or, for what vLLM does not validate, by the impl's
constructor with an error that names them.
"""

from __future__ import annotations

import sys
from collections import Counter
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
varlen_attention = None
functions.bind(sys.modules[__name__], "paged_attention", "paged_attention")
functions.bind(sys.modules[__name__], "reshape_and_cache_flash", "reshape_and_cache_flash")
functions.bind(sys.modules[__name__], "varlen_attention", "varlen_attention")

#: the extra constructor arguments vLLM may pass, with the value that asks for nothing
_NEUTRAL_EXTRAS = {"use_alibi_sqrt": False, "chunk_lookback": -1}
#: the dispatched ops the backend runs for decoder attention
OPS = ("reshape_and_cache_flash", "paged_attention")
#: the dispatched op it runs for encoder-only attention
ENCODER_ONLY_OPS = ("varlen_attention",)
#: the attention types the backend runs
ATTN_TYPES = (AttentionType.DECODER, AttentionType.ENCODER_ONLY)
#: op -> calls this process's attention layers made of it: a cheap record of which path a
#: model's layers took (the test engine reports it next to the dispatch's selections)
_calls: Counter[str] = Counter()


def call_counts() -> dict[str, int]:
    """op -> how many times this process's attention layers called it."""
    return dict(_calls)


class AttentionMetadataBuilderFL(TritonAttentionMetadataBuilder):
    """vLLM's Triton metadata builder, whose CUDA-graph support holds only where the selected
    kernels can be captured: the reference reads the sequence lengths on the host, so with it
    vLLM keeps attention out of CUDA graphs (piecewise graphs run it eagerly)."""

    @classmethod
    def get_cudagraph_support(cls, vllm_config, kv_cache_spec) -> AttentionCGSupport:
        if _reference_selected(_ops_of(kv_cache_spec)):
            return AttentionCGSupport.NEVER
        return super().get_cudagraph_support(vllm_config, kv_cache_spec)


def _ops_of(kv_cache_spec: object) -> tuple[str, ...]:
    """The ops the layers of ``kv_cache_spec`` run: vLLM gives its encoder-only layers'
    builder an ``EncoderOnlyAttentionSpec`` (asked by name: one class in both releases, no
    import of a vLLM module for it)."""
    if type(kv_cache_spec).__name__ == "EncoderOnlyAttentionSpec":
        return ENCODER_ONLY_OPS
    return OPS


def _reference_selected(ops: tuple[str, ...] = OPS) -> bool:
    """Whether the dispatch runs any of ``ops`` on the reference (or on nothing yet known)."""
    from vllm_fl.dispatch import BackendImplKind, DispatchError, get_default_manager

    manager = get_default_manager()
    try:
        kinds = [manager.resolve_candidates(op)[0].kind for op in ops]
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
        return attn_type in ATTN_TYPES

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
    """Decoder attention: writes the KV cache with ``reshape_and_cache_flash`` and attends with
    ``paged_attention``; encoder-only attention: attends with ``varlen_attention`` on the
    step's keys and values (no cache). All through the dispatch."""

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
        _refuse_unsupported(alibi_slopes, kv_cache_dtype, attn_type, sinks, extras)
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
        """Attention of the step's queries [tokens, heads, head_size] into ``output``: over the
        KV cache for decoder attention (the step's own keys and values are already in it: vLLM
        calls ``do_kv_cache_update`` first), over the step's keys and values for encoder-only
        attention."""
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
        if self.attn_type == AttentionType.ENCODER_ONLY:
            # the layer has no cache (vLLM hands an empty tensor): its keys are the step's
            _calls["varlen_attention"] += 1
            varlen_attention(
                query[:tokens],
                key[:tokens],
                value[:tokens],
                output[:tokens],
                attn_metadata.query_start_loc,
                attn_metadata.max_query_len,
                self.scale,
                bool(causal),
                self.window_left,
                self.logits_soft_cap,
            )
            return output
        _calls["paged_attention"] += 1
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
        key and value, not slot_mapping: the op stores len(slot_mapping) tokens). Nothing for
        encoder-only attention, whose layers have no cache to write into."""
        if self.attn_type == AttentionType.ENCODER_ONLY:
            return
        key_cache, value_cache = compat.split_kv_cache(kv_cache, self.head_size)
        reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping)


def _refuse_unsupported(
    alibi_slopes: list[float] | None,
    kv_cache_dtype: str,
    attn_type: str,
    sinks: torch.Tensor | None,
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
    if attn_type not in ATTN_TYPES:
        refused.append(
            f"attention type {attn_type!r} (supported: "
            # a str enum in vLLM 0.32: its values are the names vLLM's messages use
            f"{', '.join(getattr(t, 'value', t) for t in ATTN_TYPES)})"
        )
    elif attn_type == AttentionType.ENCODER_ONLY and sinks is not None:
        # the op varlen_attention has no sinks: no encoder-only model vLLM runs has them
        refused.append("sinks with encoder-only attention")
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

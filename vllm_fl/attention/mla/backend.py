"""``MLABackendFL``: vLLM's Triton MLA backend whose attention runs on the dispatch.

What it keeps of vLLM's ``TritonMLABackend``: the latent-cache layout and block sizes, CUDA-graph
support, the impl's constructor checks, and vLLM's shared MLA code (``MLACommonImpl``: the
query and output projections, the prefill's expansion of the latent into keys and values, the
context read back from the cache and the merge of partial results). What it changes:

- the cache write (``do_kv_cache_update``) calls the op ``concat_and_cache_mla``;
- the decode (``forward_mqa``) calls ``mla_decode_attention``;
- the metadata builder hands vLLM's prefill code the plugin's prefill backend
  (``prefill.MLAPrefillBackendFL``, whose attention is ``mla_prefill_attention``) instead of the
  one vLLM chose for the layer; it keeps decodes to one token per request, as vLLM 0.24's Triton
  MLA builder does (vLLM 0.32's takes several, for speculative decoding);
- its name for vLLM's backend enum (``CUSTOM``, vLLM's name for an out-of-tree backend), and what
  it claims to support: a cache in the model's dtype (FP8 caches would need the ops' FP8 paths,
  which the reference lacks), float32 too (the reference runs it; the GPU kernels take half
  precision, and the dispatch falls back where they refuse).
"""

from __future__ import annotations

import logging
import sys
from typing import ClassVar

import torch
from vllm.model_executor.layers.attention.mla_attention import QueryLenSupport
from vllm.v1.attention.backends.mla.triton_mla import (
    TritonMLABackend,
    TritonMLAImpl,
    TritonMLAMetadataBuilder,
)

from vllm_fl import functions
from vllm_fl.attention.mla.prefill import MLAPrefillBackendFL

logger = logging.getLogger("vllm_fl.vllm")
_prefill_logged = False

# The ops' dispatch trampolines as module attributes (kept current on policy changes): a call
# costs one frame over the selected impl.
concat_and_cache_mla = None
mla_decode_attention = None
functions.bind(sys.modules[__name__], "concat_and_cache_mla", "concat_and_cache_mla")
functions.bind(sys.modules[__name__], "mla_decode_attention", "mla_decode_attention")


class MLABackendFL(TritonMLABackend):
    """vLLM's Triton MLA backend with the plugin's impl and builder (see the module docstring)."""

    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float16, torch.bfloat16, torch.float32]
    supported_kv_cache_dtypes: ClassVar[list[str]] = ["auto"]

    @staticmethod
    def get_name() -> str:
        return "CUSTOM"

    @staticmethod
    def get_impl_cls() -> type[MLAImplFL]:
        return MLAImplFL

    @staticmethod
    def get_builder_cls() -> type[MLAMetadataBuilderFL]:
        return MLAMetadataBuilderFL

    @classmethod
    def supports_batch_invariance(cls) -> bool:
        return False

    @classmethod
    def supports_non_causal(cls) -> bool:
        return False


class MLAMetadataBuilderFL(TritonMLAMetadataBuilder):
    """vLLM's Triton MLA builder, with single-token decodes and the plugin's prefill backend."""

    query_len_support: ClassVar[QueryLenSupport] = QueryLenSupport.SINGLE_ONLY
    supports_non_causal_multi_token_decode: ClassVar[bool] = False

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device, *args, **kwargs) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device, *args, **kwargs)
        chosen = self._prefill_backend  # what vLLM chose for the layers
        self._prefill_backend = MLAPrefillBackendFL(
            num_heads=chosen.num_heads,
            scale=chosen.scale,
            kv_lora_rank=chosen.kv_lora_rank,
            qk_nope_head_dim=chosen.qk_nope_head_dim,
            qk_rope_head_dim=chosen.qk_rope_head_dim,
            v_head_dim=chosen.v_head_dim,
            vllm_config=vllm_config,
        )
        # The layers ask their prefill backend what it fuses (an FP8 output): the plugin's.
        layers = vllm_config.compilation_config.static_forward_context
        for name in layer_names:
            if getattr(layers.get(name), "prefill_backend", None) is not None:
                layers[name].prefill_backend = self._prefill_backend
        _log_prefill_once(chosen.get_name())

    def _reserve_attn_logits_workspace(self) -> None:
        """Nothing to reserve: vLLM 0.32's Triton MLA builder sizes the shared workspace for its
        own decode's scratch (with Triton's host helpers, which vLLM's CPU build lacks); the
        plugin's decode is an op whose impls allocate what they need."""


def _log_prefill_once(replaced: str) -> None:
    global _prefill_logged
    if not _prefill_logged:
        _prefill_logged = True
        logger.info(
            "vllm_fl: MLA prefill attention runs through the dispatch (op mla_prefill_attention) "
            "instead of vLLM's %s prefill backend",
            replaced,
        )


class MLAImplFL(TritonMLAImpl):
    """Writes the latent cache with ``concat_and_cache_mla`` and decodes with
    ``mla_decode_attention``, both through the dispatch."""

    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata,
        layer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Each decode's absorbed query [heads, kv_lora_rank + rope_dim] over its cache entries:
        the latent output [decodes, heads, kv_lora_rank] and the log-sum-exps [decodes, heads]."""
        if isinstance(q, tuple):
            q = torch.cat(q, dim=-1)
        decode = attn_metadata.decode
        batch, heads = q.shape[0], q.shape[1]
        output = q.new_empty((batch, heads, self.kv_lora_rank))
        lse = torch.empty((batch, heads), dtype=torch.float32, device=q.device)
        mla_decode_attention(
            q,
            kv_c_and_k_pe_cache,
            output,
            lse,
            decode.block_table,
            decode.seq_lens,
            attn_metadata.max_seq_len,
            self.scale,
        )
        return output, lse

    def do_kv_cache_update(
        self,
        kv_c_normed: torch.Tensor,
        k_pe: torch.Tensor,
        kv_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
        kv_cache_dtype: str,
        k_scale: torch.Tensor,
    ) -> None:
        """The step's latent [tokens, kv_lora_rank] and rotary keys [tokens, 1, rope_dim] into
        their slots."""
        if kv_cache.numel() == 0:  # vLLM's profiling run
            return
        concat_and_cache_mla(
            kv_c_normed, k_pe.squeeze(1), kv_cache, slot_mapping.flatten(), kv_cache_dtype, k_scale
        )

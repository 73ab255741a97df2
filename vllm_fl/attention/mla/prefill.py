"""``MLAPrefillBackendFL``: the attention of vLLM's MLA prefill through the op
``mla_prefill_attention``.

vLLM's MLA prefill expands the latent into per-head keys and values and hands them to a prefill
backend twice: for the new tokens (causal; their log-sum-exps too when there is earlier context
to merge with) and for each chunk of that context read back from the cache (not causal, with
log-sum-exps). vLLM picks the backend per layer (FlashAttention on Hopper, an SDPA on the CPU);
the plugin's MLA builder (``backend.MLAMetadataBuilderFL``) hands its layers this one, whose
attention is the dispatch's choice. FP8 prefill queries and outputs are not supported: vLLM asks
only backends that claim them.
"""

from __future__ import annotations

import sys
from typing import ClassVar

import torch
from vllm.v1.attention.backends.mla.prefill.base import MLAPrefillBackend

from vllm_fl import compat, functions

# The op's dispatch trampoline as a module attribute (kept current on policy changes).
mla_prefill_attention = None
functions.bind(sys.modules[__name__], "mla_prefill_attention", "mla_prefill_attention")


class MLAPrefillBackendFL(MLAPrefillBackend):
    """The new tokens' and the context chunks' attention through ``mla_prefill_attention``."""

    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float16, torch.bfloat16, torch.float32]

    @staticmethod
    def get_name() -> str:
        return "VLLM_FL"

    def run_prefill_new_tokens(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        return_softmax_lse: bool,
        out: torch.Tensor | None = None,
        output_scale: torch.Tensor | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Causal attention of each prefill's new tokens [tokens, heads, ...] among themselves."""
        if output_scale is not None:
            raise NotImplementedError(
                "vllm_fl MLA prefill (MLAPrefillBackendFL) does not write FP8 outputs "
                "(output_scale)"
            )
        meta = self._prefill_metadata
        return self._attend(
            q,
            k,
            v,
            meta.query_start_loc,
            meta.query_start_loc,
            meta.max_query_len,
            meta.max_query_len,
            causal=True,
            return_lse=return_softmax_lse,
            out=out,
        )

    def run_prefill_context_chunk(
        self,
        chunk=None,
        q: torch.Tensor | None = None,
        k: torch.Tensor | None = None,
        v: torch.Tensor | None = None,
        out: torch.Tensor | None = None,
        *,
        chunk_idx: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Attention of the prefills' new tokens over one chunk of their cached context (every
        query sees all of its sequence's keys in the chunk), with the log-sum-exps. vLLM 0.24
        names the chunk by ``chunk_idx``, 0.32 passes it as ``chunk``."""
        cu_q, cu_k, max_q, max_k = compat.mla_context_chunk(
            self._prefill_metadata, chunk if chunk_idx is None else chunk_idx
        )
        return self._attend(
            q, k, v, cu_q, cu_k, max_q, max_k, causal=False, return_lse=True, out=out
        )

    def _attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        cu_seqlens_q: torch.Tensor,
        cu_seqlens_k: torch.Tensor,
        max_seqlen_q: int,
        max_seqlen_k: int,
        causal: bool,
        return_lse: bool,
        out: torch.Tensor | None,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        tokens, heads = q.shape[0], q.shape[1]
        output = out if out is not None else q.new_empty((tokens, heads, v.shape[-1]))
        lse = None
        if return_lse:
            lse = torch.empty((heads, tokens), dtype=torch.float32, device=q.device)
        mla_prefill_attention(
            q,
            k,
            v,
            output,
            lse,
            cu_seqlens_q,
            cu_seqlens_k,
            max_seqlen_q,
            max_seqlen_k,
            self.scale,
            causal,
        )
        return (output, lse) if return_lse else output

"""Multi-head latent attention when FlagGems is the preferred backend: portable Triton kernels
(``vllm_fl.kernels.mla``), nothing of vLLM's compiled libraries.

- ``concat_and_cache_mla``: FlagGems' kernel.
- ``gather_and_maybe_dequant_cache``: the kernel library's Triton gather (FlagGems has none).
- ``merge_attn_states``: vLLM's Triton kernel.
- ``mla_prefill_attention``: FlagGems' ``flash_attn_varlen_func``.
- ``mla_decode_attention``: vLLM's Triton ``decode_attention_fwd``, as vLLM's Triton MLA
  backend runs it.

A cache in the model's dtype only (``kv_cache_dtype`` 'auto') and no FP8 output: anything else
is refused with an error naming it, and the dispatch tries the next backend.
"""

import torch

from vllm_fl.kernels import mla as kernels

AUTO = "auto"


def _refuse(op: str, what: str) -> None:
    raise ValueError(f"flagos {op}: {what} is not supported (a cache in the model's dtype only)")


def concat_and_cache_mla(
    kv_c: torch.Tensor,
    k_pe: torch.Tensor,
    kv_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    kv_cache_dtype: str,
    scale: torch.Tensor,
) -> None:
    """FlagGems' ``concat_and_cache_mla``."""
    if kv_cache_dtype != AUTO:
        _refuse("concat_and_cache_mla", f"kv_cache_dtype {kv_cache_dtype!r}")
    kernels.concat_and_cache_mla(kv_c, k_pe, kv_cache, slot_mapping)


def gather_and_maybe_dequant_cache(
    src_cache: torch.Tensor,
    dst: torch.Tensor,
    block_table: torch.Tensor,
    cu_seq_lens: torch.Tensor,
    token_to_seq: torch.Tensor,
    num_tokens: int,
    kv_cache_dtype: str,
    scale: torch.Tensor,
    seq_starts: torch.Tensor | None = None,
) -> None:
    """The kernel library's one-launch Triton gather."""
    if kv_cache_dtype != AUTO:
        _refuse("gather_and_maybe_dequant_cache", f"kv_cache_dtype {kv_cache_dtype!r}")
    kernels.gather_cache(
        src_cache, dst, block_table, cu_seq_lens, token_to_seq, num_tokens, seq_starts
    )


def merge_attn_states(
    output: torch.Tensor,
    prefix_output: torch.Tensor,
    prefix_lse: torch.Tensor,
    suffix_output: torch.Tensor,
    suffix_lse: torch.Tensor,
    output_lse: torch.Tensor | None = None,
    prefill_tokens_with_context: int | None = None,
    output_scale: torch.Tensor | None = None,
) -> None:
    """vLLM's Triton ``merge_attn_states``."""
    if output_scale is not None:
        _refuse("merge_attn_states", "an FP8 output (output_scale)")
    kernels.merge_attn_states(
        output,
        prefix_output,
        prefix_lse,
        suffix_output,
        suffix_lse,
        output_lse,
        prefill_tokens_with_context,
    )


# the kernel library's functions take the ops' arguments as they are
# FlagGems' flash_attn_varlen_func, the values padded to the keys' head size
mla_prefill_attention = kernels.prefill_attention
# vLLM's Triton decode_attention_fwd over the latent cache
mla_decode_attention = kernels.decode_attention

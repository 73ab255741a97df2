"""Attention when FlagGems is the preferred backend: the plugin's attention backend on portable
Triton kernels (``vllm_fl.kernels.attention``), nothing of vLLM's compiled libraries.

- ``attention_backend``: the plugin's backend (``vllm_fl.attention``), whose cache write and
  attention are the ops below; for MLA models the plugin's MLA backend
  (``vllm_fl.attention.mla``), whose ops are in ``mla``.
- ``reshape_and_cache_flash``: FlagGems' kernel where its addressing fits the cache's layout
  (vLLM 0.24's), else vLLM's Triton kernel.
- ``paged_attention``: per batch, FlagGems' ``flash_attn_varlen_func`` for prefills (its block
  table scaled to the cache's page spacing) and vLLM's Triton ``unified_attention`` for decodes,
  sinks and float32 (``vllm_fl.kernels.attention.paged_attention``, which says what was
  measured).
- ``varlen_attention`` (encoder-only layers, no KV cache): FlagGems' ``flash_attn_varlen_func``
  on the step's keys and values; float16 and bfloat16 only (it refuses float32 with an error,
  and the dispatch takes the next backend).
"""

import torch

from vllm_fl.attention import PLUGIN_BACKEND
from vllm_fl.attention.mla import MLA_BACKEND
from vllm_fl.kernels import attention as kernels


def attention_backend(use_mla: bool = False) -> str:
    """The plugin's attention backend (its MLA backend for MLA models)."""
    return MLA_BACKEND if use_mla else PLUGIN_BACKEND


def reshape_and_cache_flash(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """FlagGems' cache write, or vLLM's Triton one where FlagGems' addressing does not fit."""
    kernels.reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping)


# FlagGems' FlashAttention-2 for prefills, vLLM's Triton unified_attention otherwise
paged_attention = kernels.paged_attention

# FlagGems' FlashAttention-2 on the step's own keys and values (no block table)
varlen_attention = kernels.varlen_attention

"""Multi-head latent attention when the CUDA vendor backend is preferred: what vanilla vLLM runs
on the GPU.

The cache write, the context gather and the merge are vLLM's own functions as vLLM shipped them
(``vllm_fl.functions.original``: the plugin routes vLLM's calls of those names through the
dispatch, so calling the module attribute here would come back to the dispatch): CUDA kernels of
``_C_cache_ops`` and, for the merge, vLLM's choice between its CUDA and Triton kernels. The
prefill attention is vLLM's FlashAttention as vLLM's FlashAttention MLA prefill backend calls
it: the version vLLM picks for the GPU, the values padded to the keys' head size where that
version cannot take two head sizes. The decode has no cuda impl: vanilla vLLM's MLA backends
decode inside their own kernels (FlashMLA, FlashAttention MLA), not through an op of this shape.
"""

import functools

import torch

from vllm_fl.functions import original


def concat_and_cache_mla(
    kv_c: torch.Tensor,
    k_pe: torch.Tensor,
    kv_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    kv_cache_dtype: str,
    scale: torch.Tensor,
) -> None:
    """``_C_cache_ops.concat_and_cache_mla`` through vLLM's wrapper."""
    original("concat_and_cache_mla")(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale)


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
    """``_C_cache_ops.gather_and_maybe_dequant_cache`` through vLLM's wrapper."""
    original("gather_and_maybe_dequant_cache")(
        src_cache,
        dst,
        block_table,
        cu_seq_lens,
        token_to_seq,
        num_tokens,
        kv_cache_dtype,
        scale,
        seq_starts,
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
    """vLLM's ``merge_attn_states``: ``_C.merge_attn_states`` where its CUDA kernel takes the
    dtype and head size, vLLM's Triton kernel elsewhere."""
    original("merge_attn_states")(
        output,
        prefix_output,
        prefix_lse,
        suffix_output,
        suffix_lse,
        output_lse,
        prefill_tokens_with_context,
        output_scale,
    )


@functools.cache
def _flash_attn_setup(qk_head_dim: int, v_head_dim: int) -> tuple[int | None, bool]:
    """(the FlashAttention version vLLM's MLA prefill uses, whether it needs the values padded
    to the keys' head size): FlashAttention 3 on Hopper and 4 take two head sizes."""
    from vllm.platforms import current_platform
    from vllm.v1.attention.backends import fa_utils

    version = fa_utils.get_flash_attn_version(head_size=qk_head_dim, head_size_v=v_head_dim)
    capability = current_platform.get_device_capability()
    two_sizes = version == 4 or (version == 3 and capability is not None and capability[0] == 9)
    return version, not two_sizes


def mla_prefill_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    output: torch.Tensor,
    lse: torch.Tensor | None,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    softmax_scale: float,
    causal: bool,
) -> None:
    """vLLM's ``flash_attn_varlen_func``, as its FlashAttention MLA prefill backend calls it."""
    import vllm.envs as envs
    from vllm.v1.attention.backends.fa_utils import flash_attn_varlen_func

    v_head_dim = v.shape[-1]
    version, pad = _flash_attn_setup(q.shape[-1], v_head_dim)
    extra: dict[str, object] = {} if version is None else {"fa_version": version}
    if envs.VLLM_BATCH_INVARIANT:
        extra["num_splits"] = 1
    if pad:
        v = torch.nn.functional.pad(v, [0, q.shape[-1] - v_head_dim], value=0)
    result = flash_attn_varlen_func(
        q=q,
        k=k,
        v=v,
        cu_seqlens_q=cu_seqlens_q,
        cu_seqlens_k=cu_seqlens_k,
        max_seqlen_q=max_seqlen_q,
        max_seqlen_k=max_seqlen_k,
        softmax_scale=softmax_scale,
        causal=causal,
        return_softmax_lse=lse is not None,
        out=None if pad else output,
        **extra,
    )
    out, softmax_lse = result if lse is not None else (result, None)
    if pad:
        output.copy_(out[..., :v_head_dim])
    if lse is not None:
        lse.copy_(softmax_lse)

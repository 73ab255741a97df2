"""flagos Mamba2 mixer kernels: this project's Triton kernels (``vllm_fl.kernels.mamba``), as
FlagGems has none. They take the calls without speculative decoding (``supports`` in ops.yaml
sends the others to the next backend); the prefill's SSD scan takes every call.
"""

import torch

from vllm_fl.kernels import mamba


def causal_conv1d_update(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    output: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = None,
    conv_state_indices: torch.Tensor | None = None,
    num_accepted_tokens: torch.Tensor | None = None,
    query_start_loc: torch.Tensor | None = None,
    max_query_len: int = -1,
    null_block_id: int | None = 0,
) -> None:
    """The decode convolution on the library's kernel (no varlen, no speculative decoding)."""
    mamba.causal_conv1d_update(
        x, conv_state, weight, output, bias, activation, conv_state_indices, null_block_id
    )


def causal_conv1d_fn(
    x: torch.Tensor,
    weight: torch.Tensor,
    conv_states: torch.Tensor,
    query_start_loc: torch.Tensor,
    output: torch.Tensor,
    bias: torch.Tensor | None = None,
    cache_indices: torch.Tensor | None = None,
    has_initial_state: torch.Tensor | None = None,
    activation: str | None = "silu",
    pad_slot_id: int = -1,
    null_block_id: int | None = 0,
) -> None:
    """The prefill convolution on the library's kernel."""
    mamba.causal_conv1d_fn(
        x,
        weight,
        conv_states,
        query_start_loc,
        output,
        bias,
        cache_indices,
        has_initial_state,
        activation,
        pad_slot_id,
        null_block_id,
    )


def selective_state_update(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    dt_bias: torch.Tensor,
    output: torch.Tensor,
    z: torch.Tensor | None = None,
    dt_softplus: bool = False,
    state_batch_indices: torch.Tensor | None = None,
    dst_state_batch_indices: torch.Tensor | None = None,
    null_block_id: int = 0,
    num_accepted_tokens: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
) -> None:
    """The SSM decode step on the library's kernel (no speculative decoding)."""
    mamba.selective_state_update(
        state,
        x,
        dt,
        A,
        B,
        C,
        D,
        dt_bias,
        output,
        z,
        dt_softplus,
        state_batch_indices,
        dst_state_batch_indices,
        null_block_id,
        cu_seqlens,
    )


def mamba_chunk_scan_combined(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    cu_seqlens: torch.Tensor,
    cu_chunk_seqlens: torch.Tensor,
    last_chunk_indices: torch.Tensor,
    seq_idx: torch.Tensor,
    output: torch.Tensor,
    states: torch.Tensor,
    dt_min: float,
    dt_max: float,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    initial_states: torch.Tensor | None = None,
    dt_softplus: bool = False,
    return_intermediate_states: bool = False,
) -> None:
    """The prefill's SSD scan on the library's kernels. A sequence's chunks are consecutive
    and end at its entry of last_chunk_indices (as vLLM's metadata lays them out), so the
    kernels read the sequences' chunk ranges from it rather than from cu_seqlens or seq_idx."""
    mamba.mamba_chunk_scan_combined(
        x,
        dt,
        A,
        B,
        C,
        chunk_size,
        cu_chunk_seqlens,
        last_chunk_indices,
        output,
        states,
        dt_min,
        dt_max,
        D,
        z,
        dt_bias,
        initial_states,
        dt_softplus,
        return_intermediate_states,
    )

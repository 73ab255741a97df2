"""The Mamba2 mixer's convolutions, SSM decode step (``mamba_kernels``) and prefill SSD scan
(``ssd_kernels``) on this library's Triton kernels, launched through Triton's own launcher.

They serve the calls the kernels take (no speculative decoding: ops.yaml's ``supports`` of the
flagos impls says so); outputs and states are written in place, as the ops define.
"""

from __future__ import annotations

import functools
from types import ModuleType

import torch

#: the activations vLLM's conv1d kernels apply
_SILU = ("silu", "swish")


@functools.cache
def _own() -> ModuleType:
    """``mamba_kernels``, imported on first use: its kernels need Triton."""
    from vllm_fl.kernels import mamba_kernels

    return mamba_kernels


def _run(kernel, planned) -> None:
    kernel[planned.grid](*planned.args, **planned.kwargs)


def causal_conv1d_update(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    output: torch.Tensor,
    bias: torch.Tensor | None,
    activation: str | None,
    conv_state_indices: torch.Tensor | None,
    null_block_id: int | None,
) -> None:
    """One decode step of the depthwise causal conv1d (x [batch, dim] or [batch, dim, seqlen])."""
    own = _own()
    planned = own.conv1d_update_launch(
        x,
        conv_state,
        weight,
        output,
        bias,
        activation in _SILU,
        conv_state_indices,
        null_block_id,
    )
    _run(own.conv1d_update_kernel, planned)


def causal_conv1d_fn(
    x: torch.Tensor,
    weight: torch.Tensor,
    conv_states: torch.Tensor,
    query_start_loc: torch.Tensor,
    output: torch.Tensor,
    bias: torch.Tensor | None,
    cache_indices: torch.Tensor | None,
    has_initial_state: torch.Tensor | None,
    activation: str | None,
    pad_slot_id: int,
    null_block_id: int | None,
) -> None:
    """The prefill's depthwise causal conv1d over a varlen batch (x [dim, tokens])."""
    own = _own()
    planned = own.conv1d_fwd_launch(
        x,
        weight,
        conv_states,
        query_start_loc,
        output,
        bias,
        cache_indices,
        has_initial_state,
        activation in _SILU,
        pad_slot_id,
        null_block_id,
    )
    _run(own.conv1d_fwd_kernel, planned)


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
    z: torch.Tensor | None,
    dt_softplus: bool,
    state_batch_indices: torch.Tensor | None,
    dst_state_batch_indices: torch.Tensor | None,
    null_block_id: int,
    cu_seqlens: torch.Tensor | None,
) -> None:
    """The SSM's decode step, one sequence's tokens in order (varlen with cu_seqlens)."""
    own = _own()
    planned = own.ssm_update_launch(
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
    _run(own.ssm_update_kernel, planned)


@functools.cache
def _ssd() -> ModuleType:
    """``ssd_kernels``, imported on first use: its kernels need Triton."""
    from vllm_fl.kernels import ssd_kernels

    return ssd_kernels


def mamba_chunk_scan_combined(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    cu_chunk_seqlens: torch.Tensor,
    last_chunk_indices: torch.Tensor,
    output: torch.Tensor,
    states: torch.Tensor,
    dt_min: float,
    dt_max: float,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    initial_states: torch.Tensor | None,
    dt_softplus: bool,
    return_intermediate_states: bool,
) -> None:
    """The prefill's SSD scan over a varlen batch: four launches (``ssd_kernels``) writing
    ``output`` and ``states`` (each sequence's final state, or every chunk's)."""
    if x.shape[0] == 0 or cu_chunk_seqlens.numel() < 2:
        return
    for kernel, planned in _ssd().ssd_launches(
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
    ):
        _run(kernel, planned)

"""CUDA vendor Mamba2 mixer kernels: vLLM's own, called as the mixer calls them.

vLLM's Triton conv1d and SSD scan kernels, and the selective state update of vLLM's configured SSU
backend (``--mamba-backend``: Triton, FlashInfer). The plugin replaces these functions only where
the Mamba2 mixer bound them by name (``vllm_fl.mamba``), so the modules that define them still
hold vLLM's. Each writes into the op's ``output`` (and state) instead of returning a new tensor.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch

_OPS = "vllm.model_executor.layers.mamba.ops"


def _vllm(module: str, name: str) -> Callable[..., Any]:
    import importlib

    return getattr(importlib.import_module(f"{_OPS}.{module}"), name)


@functools.cache
def _is_blackwell() -> bool:
    # the launch-config hint the mixer passes vLLM's SSU (its tuned tables differ on SM100)
    from vllm.platforms import current_platform

    return bool(current_platform.is_device_capability_family(100))


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
    """vLLM's Triton ``causal_conv1d_update``, writing into ``output`` (vLLM's ``out``; a release
    whose function has no ``out``, 0.24, writes over the ``x`` it is given: a copy of ``x`` where
    ``output`` is another tensor)."""
    fn = _vllm("causal_conv1d", "causal_conv1d_update")
    options = dict(
        conv_state_indices=conv_state_indices,
        num_accepted_tokens=num_accepted_tokens,
        query_start_loc=query_start_loc,
        max_query_len=max_query_len,
        null_block_id=null_block_id,
    )
    if _takes_out(fn):
        fn(x, conv_state, weight, bias, activation, out=output, **options)
        return
    result = fn(x if output is x else x.clone(), conv_state, weight, bias, activation, **options)
    if result is not output:
        output.copy_(result.view_as(output))


@functools.cache
def _takes_out(fn: Callable[..., Any]) -> bool:
    import inspect

    return "out" in inspect.signature(fn).parameters


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
    """vLLM's Triton ``causal_conv1d_fn``; its result copied into ``output``. Its kernel reads
    the index and initial-state flags unconditionally, so where a call leaves them out they are
    made as the op defines them (state i, no initial state)."""
    batch = query_start_loc.numel() - 1
    if cache_indices is None:
        cache_indices = torch.arange(batch, dtype=torch.int32, device=x.device)
    if has_initial_state is None:
        has_initial_state = torch.zeros(batch, dtype=torch.bool, device=x.device)
    result = _vllm("causal_conv1d", "causal_conv1d_fn")(
        x,
        weight,
        bias,
        conv_states,
        query_start_loc,
        cache_indices=cache_indices,
        has_initial_state=has_initial_state,
        activation=activation,
        pad_slot_id=pad_slot_id,
        null_block_id=null_block_id,
    )
    output.copy_(result)


def _ssu() -> Callable[..., Any]:
    """vLLM's configured SSU backend; its Triton kernel (vLLM's default) where no engine
    configured one (a kernel test)."""
    from vllm.model_executor.layers.mamba.ops import ssu_dispatch

    try:
        return ssu_dispatch.get_mamba_ssu_backend()
    except RuntimeError:
        return _vllm("mamba_ssm", "selective_state_update")


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
    """vLLM's selective state update (its configured backend), writing into ``output``."""
    _ssu()(
        state,
        x,
        dt,
        A,
        B,
        C,
        D,
        dt_bias,
        z=z,
        dt_softplus=dt_softplus,
        state_batch_indices=state_batch_indices,
        dst_state_batch_indices=dst_state_batch_indices,
        null_block_id=null_block_id,
        out=output,
        num_accepted_tokens=num_accepted_tokens,
        cu_seqlens=cu_seqlens,
        is_blackwell=_is_blackwell(),
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
    """vLLM's Triton ``mamba_chunk_scan_combined_varlen`` (output written in place, its states
    in ``states``' dtype copied into ``states``)."""
    result = _vllm("ssd_combined", "mamba_chunk_scan_combined_varlen")(
        x,
        dt,
        A,
        B,
        C,
        chunk_size,
        cu_seqlens=cu_seqlens,
        cu_chunk_seqlens=cu_chunk_seqlens,
        last_chunk_indices=last_chunk_indices,
        seq_idx=seq_idx,
        out=output,
        D=D,
        z=z,
        dt_bias=dt_bias,
        initial_states=initial_states,
        dt_softplus=dt_softplus,
        dt_limit=(dt_min, dt_max),
        return_intermediate_states=return_intermediate_states,
        state_dtype=states.dtype,
    )
    states.copy_(result)

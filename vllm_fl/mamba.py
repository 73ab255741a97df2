"""The Mamba2 mixer's kernels on the dispatch ops, on every platform.

vLLM's ``MambaMixer2`` (Mamba2, Falcon-H1, Nemotron-H, Bamba, Zamba2, ...) calls four kernels as
functions it imported by name into its module, ``vllm.model_executor.layers.mamba.mamba_mixer2``:
``causal_conv1d_fn`` (prefill) and ``causal_conv1d_update`` (decode) from
``ops.causal_conv1d``, ``mamba_chunk_scan_combined_varlen`` (the prefill's SSD scan) from
``ops.ssd_combined`` and ``selective_state_update`` (the decode's SSM step) from
``ops.ssu_dispatch``. Which kernels those names hold vLLM decides when the modules are imported:
on CUDA its Triton kernels (and its configured SSU backend), on its CPU platform, where
``current_platform.is_cpu()`` answers True, its CPU ones (``causal_conv1d_fn_cpu`` in PyTorch,
``_C::causal_conv1d_update_cpu_vec``, ``_C::mamba_chunk_scan_fwd_cpu`` under vLLM's Python
wrapper, ``_C::selective_state_update_cpu``).

:func:`install` (run where the model is built) puts the adapters of this module in the mixer's
module in their place: each takes vLLM's call as the mixer makes it, allocates what vLLM's function
allocates and returns what it returns, and calls the op (``causal_conv1d_fn``,
``causal_conv1d_update``, ``mamba_chunk_scan_combined``, ``selective_state_update``), whose cuda
impl is vLLM's function again. Only the mixer's module is changed: vLLM's other layers that
import these kernels (the Mamba1 mixer, ``ShortConv``, the gated-delta-net layers) pass arguments
the ops do not model (prefix caching's per-block state indices) and keep vLLM's kernels, as do the
defining modules, which is where the cuda impls find vLLM's. A call with prefix caching's
arguments still goes to vLLM's function (the mixer of vLLM 0.32 passes none).
"""

from __future__ import annotations

import importlib
import logging
import sys
import threading
from collections import Counter
from typing import Any, Callable

import torch

from vllm_fl import functions

logger = logging.getLogger("vllm_fl.vllm")

#: the module whose names the adapters replace
MIXER_MODULE = "vllm.model_executor.layers.mamba.mamba_mixer2"
#: vLLM's name in the mixer's module -> the op its adapter calls
OPS: dict[str, str] = {
    "causal_conv1d_fn": "causal_conv1d_fn",
    "causal_conv1d_update": "causal_conv1d_update",
    "mamba_chunk_scan_combined_varlen": "mamba_chunk_scan_combined",
    "selective_state_update": "selective_state_update",
}
#: vLLM's defaults (``vllm.v1.attention.backends.utils``), kept here so this module imports
#: without vLLM
PAD_SLOT_ID = -1
NULL_BLOCK_ID = 0

# The ops' dispatch trampolines as module attributes (kept current on policy changes).
causal_conv1d_fn_op: Callable[..., None] | None = None
causal_conv1d_update_op: Callable[..., None] | None = None
mamba_chunk_scan_combined_op: Callable[..., None] | None = None
selective_state_update_op: Callable[..., None] | None = None
for _op in OPS.values():
    functions.bind(sys.modules[__name__], f"{_op}_op", _op)

_lock = threading.Lock()
_vllm: dict[str, Callable[..., Any]] = {}  # name -> the function the mixer held before install
_calls: Counter[str] = Counter()  # op -> calls the adapters made in this process


def _activation(activation: bool | str | None) -> str | None:
    # vLLM's conv1d kernels take True for silu
    if isinstance(activation, bool):
        return "silu" if activation else None
    return activation


def causal_conv1d_fn(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    conv_states: torch.Tensor,
    query_start_loc: torch.Tensor,
    cache_indices: torch.Tensor | None = None,
    has_initial_state: torch.Tensor | None = None,
    activation: bool | str | None = "silu",
    pad_slot_id: int = PAD_SLOT_ID,
    null_block_id: int | None = NULL_BLOCK_ID,
    block_idx_first_scheduled_token: torch.Tensor | None = None,
    block_idx_last_scheduled_token: torch.Tensor | None = None,
    initial_state_idx: torch.Tensor | None = None,
    num_computed_tokens: torch.Tensor | None = None,
    block_size_to_align: int = 0,
    metadata: Any = None,
    validate_data: bool = False,
) -> torch.Tensor:
    """vLLM's ``causal_conv1d_fn`` (its signature and result, x [dim, tokens] -> [dim, tokens]
    in x's layout and dtype; ``conv_states`` updated) through the op ``causal_conv1d_fn``.
    ``metadata`` (the launch grid vLLM's Triton kernel precomputes per step) and
    ``validate_data`` do not change the result and are not passed on."""
    if block_idx_last_scheduled_token is not None:
        return _vllm["causal_conv1d_fn"](
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
            block_idx_first_scheduled_token=block_idx_first_scheduled_token,
            block_idx_last_scheduled_token=block_idx_last_scheduled_token,
            initial_state_idx=initial_state_idx,
            num_computed_tokens=num_computed_tokens,
            block_size_to_align=block_size_to_align,
            metadata=metadata,
        )
    _calls["causal_conv1d_fn"] += 1
    # x's strides: the mixer views slices of the transposed result as [tokens, heads, dim]
    out = torch.empty_like(x)
    causal_conv1d_fn_op(
        x,
        weight,
        conv_states,
        query_start_loc,
        out,
        bias,
        cache_indices,
        has_initial_state,
        _activation(activation),
        pad_slot_id,
        null_block_id,
    )
    return out


def causal_conv1d_update(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: bool | str | None = None,
    conv_state_indices: torch.Tensor | None = None,
    num_accepted_tokens: torch.Tensor | None = None,
    query_start_loc: torch.Tensor | None = None,
    max_query_len: int = -1,
    null_block_id: int | None = NULL_BLOCK_ID,
    block_idx_last_scheduled_token: torch.Tensor | None = None,
    initial_state_idx: torch.Tensor | None = None,
    validate_data: bool = False,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """vLLM's ``causal_conv1d_update`` through the op ``causal_conv1d_update``: the result is
    written into ``out``, or over ``x`` without one (as vLLM's kernel does), and returned."""
    if block_idx_last_scheduled_token is not None or initial_state_idx is not None:
        return _vllm["causal_conv1d_update"](
            x,
            conv_state,
            weight,
            bias,
            activation,
            conv_state_indices=conv_state_indices,
            num_accepted_tokens=num_accepted_tokens,
            query_start_loc=query_start_loc,
            max_query_len=max_query_len,
            null_block_id=null_block_id,
            block_idx_last_scheduled_token=block_idx_last_scheduled_token,
            initial_state_idx=initial_state_idx,
            # vLLM 0.24's function has no ``out``, nor do its mixer's calls
            **({} if out is None else {"out": out}),
        )
    _calls["causal_conv1d_update"] += 1
    output = x if out is None else out
    causal_conv1d_update_op(
        x,
        conv_state,
        weight,
        output,
        bias,
        _activation(activation),
        conv_state_indices,
        num_accepted_tokens,
        query_start_loc,
        max_query_len,
        null_block_id,
    )
    return output


def selective_state_update(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    dt_bias: torch.Tensor,
    z: torch.Tensor | None = None,
    dt_softplus: bool = False,
    state_batch_indices: torch.Tensor | None = None,
    dst_state_batch_indices: torch.Tensor | None = None,
    null_block_id: int = NULL_BLOCK_ID,
    out: torch.Tensor | None = None,
    num_accepted_tokens: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
    is_blackwell: bool = False,
) -> None:
    """vLLM's ``ssu_dispatch.selective_state_update`` through the op ``selective_state_update``:
    ``state`` and ``out`` updated in place. ``is_blackwell`` picks launch configs of vLLM's
    kernel (its cuda impl asks the platform itself)."""
    _calls["selective_state_update"] += 1
    selective_state_update_op(
        state,
        x,
        dt,
        A,
        B,
        C,
        D,
        dt_bias,
        torch.empty_like(x) if out is None else out,
        z,
        dt_softplus,
        state_batch_indices,
        dst_state_batch_indices,
        null_block_id,
        num_accepted_tokens,
        cu_seqlens,
    )


def mamba_chunk_scan_combined_varlen(
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
    out: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    initial_states: torch.Tensor | None = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
    return_intermediate_states: bool = False,
    state_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """vLLM's ``mamba_chunk_scan_combined_varlen`` through the op ``mamba_chunk_scan_combined``:
    ``out`` written in place; returns the final state of each sequence (every chunk's with
    ``return_intermediate_states``) in ``state_dtype`` (C's dtype without one)."""
    _calls["mamba_chunk_scan_combined"] += 1
    count = (cu_chunk_seqlens if return_intermediate_states else cu_seqlens).numel() - 1
    states = torch.empty(
        (count, x.shape[1], x.shape[2], B.shape[2]),
        dtype=C.dtype if state_dtype is None else state_dtype,
        device=x.device,
    )
    mamba_chunk_scan_combined_op(
        x,
        dt,
        A,
        B,
        C,
        chunk_size,
        cu_seqlens,
        cu_chunk_seqlens,
        last_chunk_indices,
        seq_idx,
        out,
        states,
        float(dt_limit[0]),
        float(dt_limit[1]),
        D,
        z,
        dt_bias,
        initial_states,
        dt_softplus,
        return_intermediate_states,
    )
    return states


def install(policy: Any = None) -> list[str]:
    """Put the adapters in the Mamba2 mixer's module; idempotent. A name whose op the OOT policy
    excludes (``VLLM_FL_OOT_BLACKLIST=selective_state_update``) keeps vLLM's function. Returns
    the ``module.name`` sites holding an adapter."""
    if policy is None:
        from vllm_fl.dispatch import get_policy

        policy = get_policy()
    if not policy.oot_active:
        return installed()
    # imported here, in the process that runs the model: the platform is known, so vLLM's
    # modules pick the kernels this platform runs
    module = importlib.import_module(MIXER_MODULE)
    newly = []
    with _lock:
        for name, op in OPS.items():
            adapter = globals()[name]
            if not policy.oot_allowed(op, op) or getattr(module, name) is adapter:
                continue
            _vllm[name] = getattr(module, name)
            setattr(module, name, adapter)
            newly.append(f"{name} -> {op}")
    if newly:
        logger.info(
            "vllm_fl: the Mamba2 mixer's kernels run through the dispatch (%s): %s",
            MIXER_MODULE,
            ", ".join(newly),
        )
    return installed()


def installed() -> list[str]:
    """The ``module.name`` sites holding an adapter in this process."""
    return [f"{MIXER_MODULE}.{name}" for name in sorted(_vllm)]


def call_counts() -> dict[str, int]:
    """op -> how many calls the adapters made through the dispatch in this process."""
    return dict(sorted(_calls.items()))


def _reset_for_tests() -> None:
    """Give the mixer vLLM's functions back and forget the counts (tests only)."""
    with _lock:
        module = sys.modules.get(MIXER_MODULE)
        for name, fn in _vllm.items():
            if module is not None:
                setattr(module, name, fn)
        _vllm.clear()
        _calls.clear()

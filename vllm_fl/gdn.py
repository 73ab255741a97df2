"""Qwen3-Next's gated-delta-net (GDN) kernels on the dispatch ops of ops.yaml.

vLLM's GDN layer (``vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn``, vLLM 0.32)
computes its linear attention with functions that return results *and* update the layer's state
cache in place, a form a function op (whose impls either return results or write into
out-parameters) cannot take as it is:

- on the GPU, flash-linear-attention's Triton functions (``vllm.third_party.
  flash_linear_attention.ops``): ``fused_sigmoid_gating_delta_rule_update`` (decodes beside
  prefills, speculative decodes), ``fused_recurrent_gated_delta_rule_packed_decode`` (batches of
  decodes, ``VLLM_ENABLE_FLA_PACKED_RECURRENT_DECODE``, on by default) and
  ``chunk_gated_delta_rule`` (prefills, through the ``ChunkGatedDeltaRule`` CustomOp's Triton
  backend);
- on the CPU, ``vllm._custom_ops``' kernels ``fused_gdn_gating_cpu``,
  ``chunk_gated_delta_rule_cpu`` (prefills), ``fused_sigmoid_gating_delta_rule_update_cpu``
  (decodes) and its ``_spec_cpu`` variant, which the layer takes where ``is_cpu()`` (the plugin's
  CPU platform answers True in vLLM's mamba package, ``vllm_fl.platform.cpu``).

:func:`install` replaces each of those functions, in the module defining it and in every loaded
vLLM module that bound it by name (``from ... import``; a later import finds the replacement),
with an adapter of the same signature and results that calls the ops ``fused_gdn_gating``,
``fused_sigmoid_gating_delta_rule_update`` and ``chunk_gated_delta_rule``. The CPU kernels keep
a state [HV, V, K] in the memory order [HV, K, V] (the layer views its cache that way), so their
adapters hand the ops the transposed view: the same states, in the ops' layout. Calls the GDN
layer never makes (KDA's gates, per-token final states, ``head_first``, an output buffer) go to
vLLM's function. Each adapter logs its first call and counts its calls (:func:`calls`).

Not routed: the layer's fused prefill preparation (``fused_post_conv_prep``: split, L2 norm and
gates in one Triton kernel), its convolution (vLLM's mamba causal-conv1d kernels), vLLM's CUDA
decode kernel for speculative decoding and its FlashInfer / CuteDSL / AITER prefill backends.
The layer's output norm is vLLM's ``RMSNormGated``, which the plugin replaces (op
``rms_norm_gated``).
"""

from __future__ import annotations

import collections
import importlib
import logging
import sys
import threading
from typing import Any, Callable

import torch

from vllm_fl import functions

logger = logging.getLogger("vllm_fl.vllm")

#: vLLM's copy of flash-linear-attention (0.32; vLLM 0.24 keeps it elsewhere, and is not routed)
FLA = "vllm.third_party.flash_linear_attention.ops"
CUSTOM_OPS = "vllm._custom_ops"
GATING, RECURRENT, CHUNK = (
    "fused_gdn_gating",
    "fused_sigmoid_gating_delta_rule_update",
    "chunk_gated_delta_rule",
)

# The ops' dispatch trampolines as module attributes (kept current on policy changes).
gating_op: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = None
recurrent_op: Callable[..., None] | None = None
chunk_op: Callable[..., tuple[torch.Tensor, torch.Tensor | None]] | None = None
functions.bind(sys.modules[__name__], "gating_op", GATING)
functions.bind(sys.modules[__name__], "recurrent_op", RECURRENT)
functions.bind(sys.modules[__name__], "chunk_op", CHUNK)

_lock = threading.Lock()
_originals: dict[str, Callable[..., Any]] = {}  # vLLM function name -> vLLM's function
_installed: dict[str, list[str]] = {}  # vLLM function name -> "module.attr" sites
_calls: collections.Counter[str] = collections.Counter()


def original(name: str) -> Callable[..., Any]:
    """vLLM's function ``name`` (a key of :data:`SITES`) as vLLM defined it, before
    :func:`install`: what the cuda impls call."""
    fn = _originals.get(name)
    if fn is None:
        # not installed yet: the module attribute is still vLLM's
        fn = getattr(importlib.import_module(SITES[name][0]), name)
    return fn


def calls() -> dict[str, int]:
    """vLLM function name -> how many of vLLM's calls its adapter took in this process."""
    return dict(_calls)


def _count(name: str) -> None:
    # unlocked: a lost increment under threads would only undercount a diagnostic
    _calls[name] += 1
    if _calls[name] == 1:
        logger.info("vllm_fl: vLLM's %s ran op %s", name, SITES[name][2])


# -- the GPU path: vLLM's flash-linear-attention functions ---------------------------------------


def fused_sigmoid_gating_delta_rule_update(
    A_log: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    dt_bias: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: float = 1.0,
    threshold: float = 20.0,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    inplace_final_state: bool = True,
    cu_seqlens: torch.Tensor | None = None,
    ssm_state_indices: torch.Tensor | None = None,
    num_accepted_tokens: torch.Tensor | None = None,
    use_qk_l2norm_in_kernel: bool = False,
    is_kda: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's function of this name: the outputs and the state cache, updated in place."""
    name = "fused_sigmoid_gating_delta_rule_update"
    if is_kda or not inplace_final_state or initial_state is None or ssm_state_indices is None:
        # Kimi's per-channel gates, per-token states: not the GDN layer's calls
        return original(name)(
            A_log,
            a,
            b,
            dt_bias,
            q,
            k,
            v,
            beta,
            threshold,
            scale,
            initial_state,
            inplace_final_state,
            cu_seqlens,
            ssm_state_indices,
            num_accepted_tokens,
            use_qk_l2norm_in_kernel,
            is_kda,
        )
    _count(name)
    o = torch.empty(v.shape, dtype=q.dtype, device=q.device)
    gates = v.shape[:-1]
    recurrent_op(
        o,
        q,
        k,
        v,
        a.reshape(gates),
        b.reshape(gates),
        A_log,
        dt_bias,
        initial_state,
        ssm_state_indices,
        cu_seqlens,
        num_accepted_tokens,
        scale,
        use_qk_l2norm_in_kernel,
        beta,
        threshold,
    )
    return o, initial_state


def fused_recurrent_gated_delta_rule_packed_decode(
    mixed_qkv: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    scale: float,
    initial_state: torch.Tensor,
    out: torch.Tensor,
    ssm_state_indices: torch.Tensor,
    use_qk_l2norm_in_kernel: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's function of this name: one decode token per row of mixed_qkv [B, q | k | v],
    outputs into out [B, 1, HV, V], the state cache updated in place."""
    name = "fused_recurrent_gated_delta_rule_packed_decode"
    _count(name)
    rows = mixed_qkv.shape[0]
    value_heads, head_v, head_k = initial_state.shape[-3:]
    heads = (mixed_qkv.shape[1] - value_heads * head_v) // (2 * head_k)
    # views of the packed rows, each row a sequence of one token
    q, k, v = mixed_qkv.split([heads * head_k, heads * head_k, value_heads * head_v], dim=-1)
    recurrent_op(
        out,
        q.view(rows, 1, heads, head_k),
        k.view(rows, 1, heads, head_k),
        v.view(rows, 1, value_heads, head_v),
        a.view(rows, 1, value_heads),
        b.view(rows, 1, value_heads),
        A_log,
        dt_bias,
        initial_state,
        ssm_state_indices,
        None,
        None,
        scale,
        use_qk_l2norm_in_kernel,
    )
    return out, initial_state


def chunk_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    chunk_indices: torch.Tensor | None = None,
    chunk_offsets: torch.Tensor | None = None,
    use_qk_l2norm_in_kernel: bool = False,
    core_attn_out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """vLLM's function of this name (chunk_indices and chunk_offsets are the Triton kernels'
    precomputed launch metadata, which the op's impls derive from cu_seqlens themselves)."""
    name = "chunk_gated_delta_rule"
    if core_attn_out is not None:  # an output buffer: no caller of vLLM 0.32 passes one
        return original(name)(
            q,
            k,
            v,
            g,
            beta,
            scale,
            initial_state,
            output_final_state,
            cu_seqlens,
            chunk_indices,
            chunk_offsets,
            use_qk_l2norm_in_kernel,
            core_attn_out,
        )
    _count(name)
    return chunk_op(
        q,
        k,
        v,
        g,
        beta,
        scale,
        initial_state,
        output_final_state,
        cu_seqlens,
        use_qk_l2norm_in_kernel,
    )


# -- the CPU path: vllm._custom_ops' kernels ----------------------------------------------------


def fused_gdn_gating_cpu(
    A_log: torch.Tensor, a: torch.Tensor, b: torch.Tensor, dt_bias: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's CPU kernel of this name: g and beta of a [T, HV] as [1, T, HV]."""
    _count("fused_gdn_gating_cpu")
    g, beta = gating_op(a, b, A_log, dt_bias)
    return g.unsqueeze(0), beta.unsqueeze(0)


def fused_sigmoid_gating_delta_rule_update_cpu(
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    initial_state_source: torch.Tensor,
    initial_state_indices: torch.Tensor,
    cu_seqlens: torch.Tensor,
    use_qk_l2norm_in_kernel: bool,
    softplus_beta: float = 1.0,
    softplus_threshold: float = 20.0,
) -> torch.Tensor:
    """vLLM's CPU kernel of this name: decodes of q [1, T, H, K] from the cache slots
    initial_state_indices, outputs as [T, 1, HV, V]."""
    _count("fused_sigmoid_gating_delta_rule_update_cpu")
    o = torch.empty(v.shape, dtype=q.dtype, device=q.device)
    gates = v.shape[:-1]
    recurrent_op(
        o,
        q,
        k,
        v,
        a.reshape(gates),
        b.reshape(gates),
        A_log,
        dt_bias,
        initial_state_source.transpose(-1, -2),
        initial_state_indices,
        cu_seqlens,
        None,
        None,
        use_qk_l2norm_in_kernel,
        softplus_beta,
        softplus_threshold,
    )
    return o[0].unsqueeze(1)


def fused_sigmoid_gating_delta_rule_update_spec_cpu(
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    initial_state_source: torch.Tensor,
    spec_state_indices: torch.Tensor,
    num_accepted_tokens: torch.Tensor,
    cu_seqlens: torch.Tensor,
    use_qk_l2norm_in_kernel: bool,
    softplus_beta: float = 1.0,
    softplus_threshold: float = 20.0,
) -> torch.Tensor:
    """vLLM's CPU kernel of this name: speculative decodes of q [T, H, K], outputs [T, HV, V]."""
    _count("fused_sigmoid_gating_delta_rule_update_spec_cpu")
    o = torch.empty((1, *v.shape), dtype=q.dtype, device=q.device)
    gates = o.shape[:-1]
    recurrent_op(
        o,
        q.unsqueeze(0),
        k.unsqueeze(0),
        v.unsqueeze(0),
        a.reshape(gates),
        b.reshape(gates),
        A_log,
        dt_bias,
        initial_state_source.transpose(-1, -2),
        spec_state_indices,
        cu_seqlens,
        num_accepted_tokens,
        None,
        use_qk_l2norm_in_kernel,
        softplus_beta,
        softplus_threshold,
    )
    return o[0]


def chunk_gated_delta_rule_cpu(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    initial_state: torch.Tensor,
    output_final_state: bool,
    cu_seqlens: torch.Tensor,
    head_first: bool,
    use_qk_l2norm_in_kernel: bool,
    initial_state_indices: torch.Tensor,
    eps: float = 1e-5,
) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's CPU kernel of this name: prefills from the cache slots initial_state_indices of
    initial_state (the whole cache), their final states written back there."""
    name = "chunk_gated_delta_rule_cpu"
    if head_first:  # [B, H, T, ...] inputs: no caller of vLLM 0.32 passes them
        return original(name)(
            query,
            key,
            value,
            g,
            beta,
            initial_state,
            output_final_state,
            cu_seqlens,
            head_first,
            use_qk_l2norm_in_kernel,
            initial_state_indices,
            eps,
        )
    _count(name)
    cache = initial_state.transpose(-1, -2)
    slots = initial_state_indices.to(torch.int64)
    o, final = chunk_op(
        query,
        key,
        value,
        g,
        beta,
        None,
        cache[slots],
        output_final_state,
        cu_seqlens,
        use_qk_l2norm_in_kernel,
        eps,
    )
    if final is not None:
        cache[slots] = final.to(cache.dtype)
    return o, initial_state


#: vLLM function name -> (the module defining it, the adapter, the op it runs)
SITES: dict[str, tuple[str, Callable[..., Any], str]] = {
    "fused_sigmoid_gating_delta_rule_update": (
        f"{FLA}.fused_sigmoid_gating",
        fused_sigmoid_gating_delta_rule_update,
        RECURRENT,
    ),
    "fused_recurrent_gated_delta_rule_packed_decode": (
        f"{FLA}.fused_recurrent",
        fused_recurrent_gated_delta_rule_packed_decode,
        RECURRENT,
    ),
    "chunk_gated_delta_rule": (f"{FLA}.chunk", chunk_gated_delta_rule, CHUNK),
    "fused_gdn_gating_cpu": (CUSTOM_OPS, fused_gdn_gating_cpu, GATING),
    "fused_sigmoid_gating_delta_rule_update_cpu": (
        CUSTOM_OPS,
        fused_sigmoid_gating_delta_rule_update_cpu,
        RECURRENT,
    ),
    "fused_sigmoid_gating_delta_rule_update_spec_cpu": (
        CUSTOM_OPS,
        fused_sigmoid_gating_delta_rule_update_spec_cpu,
        RECURRENT,
    ),
    "chunk_gated_delta_rule_cpu": (CUSTOM_OPS, chunk_gated_delta_rule_cpu, CHUNK),
}


def install(policy: Any = None) -> dict[str, list[str]]:
    """Route vLLM's GDN functions (:data:`SITES`) through the ops; idempotent. A function whose
    op the OOT policy excludes (``VLLM_FL_OOT_BLACKLIST=chunk_gated_delta_rule``), or which this
    vLLM does not have, stays vLLM's. Returns vLLM function -> the ``module.attr`` sites routed."""
    if policy is None:
        from vllm_fl.dispatch import get_policy

        policy = get_policy()
    if not policy.oot_active:
        return {}
    newly = []
    for name, (module_name, adapter, op) in SITES.items():
        if name in _installed or not policy.oot_allowed(op, op):
            continue
        try:
            module = importlib.import_module(module_name)
        except ImportError:  # another vLLM release: its GDN functions live elsewhere
            continue
        vllm_fn = getattr(module, name, None)
        if vllm_fn is None:
            continue
        with _lock:
            if name in _installed:
                continue
            _originals[name] = vllm_fn
            sites = [(module, name)] + functions._name_bound_copies(vllm_fn, skip=module_name)
            for owner, attr in sites:
                setattr(owner, attr, adapter)
            _installed[name] = [f"{owner.__name__}.{attr}" for owner, attr in sites]
        newly.append(f"{module_name}.{name} -> {op}")
    if newly:
        logger.info("vllm_fl: vLLM's gated-delta-net functions run the ops: %s", ", ".join(newly))
    return installed()


def installed() -> dict[str, list[str]]:
    """vLLM function name -> the ``module.attr`` sites holding its adapter in this process."""
    return {name: list(sites) for name, sites in _installed.items()}


def _reset_for_tests() -> None:
    """Give vLLM its functions back (tests only)."""
    with _lock:
        for name, sites in _installed.items():
            for site in sites:
                module_name, _, attr = site.rpartition(".")
                setattr(sys.modules[module_name], attr, _originals[name])
        _installed.clear()
        _calls.clear()

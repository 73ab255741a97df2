"""Reference gated-delta-net (GDN) kernels in plain PyTorch: Qwen3-Next's linear attention.

The gated delta rule keeps, per sequence and value head, a state S [V, K] (float32 here, the
cache's dtype between calls). For each token, with q and k optionally L2-normalised and q scaled:

    S = S * exp(g)                  # g <= 0: the decay, in log space
    S = S + beta * (v - S k) k^T    # the delta rule's correction of what S recalls for k
    o = S q

Value head ``hv`` reads query/key head ``hv // (HV // H)`` (grouped value heads). The chunked
form vLLM runs for prefills computes the same recurrence chunk by chunk; token by token, as here,
it is the definition, so both ops' references share :func:`_recurrence`. Layouts follow vLLM's
flash-linear-attention functions: q, k [B, T, H, K], v [B, T, HV, V], g, beta and the gates a,
b [B, T, HV], states [N, HV, V, K]; with ``cu_seqlens`` B is 1 and sequence i is tokens
cu_seqlens[i] to cu_seqlens[i + 1].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import is_fake

#: the epsilon vLLM's fused recurrent kernels add to the squared norm before the L2 division
RECURRENT_L2NORM_EPS = 1e-6


def fused_gdn_gating(
    a: torch.Tensor,
    b: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    softplus_beta: float = 1.0,
    softplus_threshold: float = 20.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """g = -exp(A_log) * softplus(a + dt_bias) in float32, beta = sigmoid(b) in b's dtype."""
    return _decay(A_log, a, dt_bias, softplus_beta, softplus_threshold), torch.sigmoid(
        b.to(torch.float32)
    ).to(b.dtype)


def _decay(
    A_log: torch.Tensor,
    a: torch.Tensor,
    dt_bias: torch.Tensor,
    softplus_beta: float,
    softplus_threshold: float,
) -> torch.Tensor:
    # torch's softplus has vLLM's kernels' form: x where beta * x > threshold, else
    # log(1 + exp(beta * x)) / beta
    x = a.to(torch.float32) + dt_bias.to(torch.float32)
    soft = F.softplus(x, beta=softplus_beta, threshold=softplus_threshold)
    return -torch.exp(A_log.to(torch.float32)) * soft


def _l2norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def _recurrence(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    scale: float,
    l2norm_eps: float | None,
    states_per_token: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | list[torch.Tensor]]:
    """One sequence: q, k [T, H, K], v [T, HV, V], g, beta [T, HV] (float32), state [HV, V, K]
    float32. Returns o [T, HV, V] float32 and the final state (each token's state, a list, with
    ``states_per_token``). ``l2norm_eps`` None: q and k as given."""
    heads, value_heads = k.shape[1], v.shape[1]
    group = value_heads // heads
    q = q.to(torch.float32).repeat_interleave(group, dim=1)
    k = k.to(torch.float32).repeat_interleave(group, dim=1)
    v = v.to(torch.float32)
    if l2norm_eps is not None:
        q, k = _l2norm(q, l2norm_eps), _l2norm(k, l2norm_eps)
    q = q * scale
    outputs, states = [], []
    for t in range(q.shape[0]):
        state = state * torch.exp(g[t])[:, None, None]
        recalled = torch.einsum("hvk,hk->hv", state, k[t])
        correction = (v[t] - recalled) * beta[t][:, None]
        state = state + correction[:, :, None] * k[t][:, None, :]
        outputs.append(torch.einsum("hvk,hk->hv", state, q[t]))
        if states_per_token:
            states.append(state)
    o = torch.stack(outputs) if outputs else v.new_zeros(v.shape)
    return o, (states if states_per_token else state)


def _sequences(cu_seqlens: torch.Tensor | None, batch: int, length: int) -> list[tuple[int, int]]:
    """(first token, end) of each sequence in the flattened [B * T] token order."""
    if cu_seqlens is None:
        return [(i * length, (i + 1) * length) for i in range(batch)]
    bounds = cu_seqlens.tolist()
    return list(zip(bounds[:-1], bounds[1:]))


def fused_sigmoid_gating_delta_rule_update(
    o: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    ssm_state: torch.Tensor,
    ssm_state_indices: torch.Tensor,
    cu_seqlens: torch.Tensor | None = None,
    num_accepted_tokens: torch.Tensor | None = None,
    scale: float | None = None,
    use_qk_l2norm_in_kernel: bool = False,
    softplus_beta: float = 1.0,
    softplus_threshold: float = 20.0,
) -> None:
    """The decode step: gates from a and b (:func:`fused_gdn_gating`), the recurrence from the
    cached states, the outputs into o, the states written back (see the op's doc for the indices).
    """
    batch, length = q.shape[0], q.shape[1]
    scale = k.shape[-1] ** -0.5 if scale is None else scale
    eps = RECURRENT_L2NORM_EPS if use_qk_l2norm_in_kernel else None
    flat = {
        name: t.reshape(batch * length, *t.shape[2:])
        for name, t in (("q", q), ("k", k), ("v", v), ("a", a), ("b", b))
    }
    g = _decay(A_log, flat["a"], dt_bias, softplus_beta, softplus_threshold)
    beta = torch.sigmoid(flat["b"].to(torch.float32))
    indices = ssm_state_indices if ssm_state_indices.dim() == 2 else ssm_state_indices[:, None]
    accepted = None if num_accepted_tokens is None else num_accepted_tokens.tolist()
    rows = indices.tolist()
    for seq, (start, end) in enumerate(_sequences(cu_seqlens, batch, length)):
        if end <= start:
            continue
        first = accepted[seq] - 1 if accepted is not None else 0
        slot = rows[seq][first]
        if slot <= 0:  # vLLM's null block (padding): nothing to read or write
            continue
        tokens = slice(start, end)
        o_seq, states = _recurrence(
            flat["q"][tokens],
            flat["k"][tokens],
            flat["v"][tokens],
            g[tokens],
            beta[tokens],
            ssm_state[slot].to(torch.float32),
            scale,
            eps,
            states_per_token=indices.shape[1] > 1,
        )
        # sequence i is row i without cu_seqlens, tokens start:end of the one row with it
        target = o[seq] if cu_seqlens is None else o[0, tokens]
        target.copy_(o_seq)
        if indices.shape[1] > 1:
            # speculative decoding: the state after token t goes to the sequence's slot t
            for t, state in enumerate(states):
                if rows[seq][t] > 0:
                    ssm_state[rows[seq][t]] = state.to(ssm_state.dtype)
        else:
            ssm_state[slot] = states.to(ssm_state.dtype)


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
    use_qk_l2norm_in_kernel: bool = False,
    l2norm_eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The prefill: the recurrence over each whole sequence from its initial state (zeros
    without), o in q's dtype, the final states float32 when asked."""
    batch, length, value_heads, head_v = v.shape
    count = batch if cu_seqlens is None else cu_seqlens.shape[0] - 1
    head_k = k.shape[-1]
    if is_fake(q):  # the custom op's fake: shapes only
        o = q.new_empty((batch, length, value_heads, head_v))
        final = q.new_empty((count, value_heads, head_v, head_k), dtype=torch.float32)
        return o, final if output_final_state else None
    scale = head_k**-0.5 if scale is None else scale
    eps = l2norm_eps if use_qk_l2norm_in_kernel else None
    flat_q = q.reshape(batch * length, *q.shape[2:])
    flat_k = k.reshape(batch * length, *k.shape[2:])
    flat_v = v.reshape(batch * length, value_heads, head_v)
    flat_g = g.reshape(batch * length, value_heads).to(torch.float32)
    flat_beta = beta.reshape(batch * length, value_heads).to(torch.float32)
    o = torch.zeros(batch * length, value_heads, head_v, dtype=torch.float32, device=q.device)
    finals = []
    for seq, (start, end) in enumerate(_sequences(cu_seqlens, batch, length)):
        state = (
            torch.zeros(value_heads, head_v, head_k, dtype=torch.float32, device=q.device)
            if initial_state is None
            else initial_state[seq].to(torch.float32)
        )
        tokens = slice(start, end)
        o_seq, state = _recurrence(
            flat_q[tokens],
            flat_k[tokens],
            flat_v[tokens],
            flat_g[tokens],
            flat_beta[tokens],
            state,
            scale,
            eps,
        )
        o[tokens] = o_seq
        finals.append(state)
    o = o.view(batch, length, value_heads, head_v).to(q.dtype)
    return o, torch.stack(finals) if output_final_state else None


def chunk_test_decay(arguments: dict) -> torch.Tensor:
    """A test case's g: log decays (<= 0, float32, as vLLM's gating makes them) drawn from the
    case's v, so that they are random yet the same for every backend."""
    return -F.softplus(arguments["v"][..., 0].to(torch.float32))


def chunk_test_beta(arguments: dict) -> torch.Tensor:
    """A test case's beta: sigmoid values in (0, 1), float32, drawn from the case's v."""
    return torch.sigmoid(arguments["v"][..., 1].to(torch.float32))

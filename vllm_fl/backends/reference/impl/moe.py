"""Reference mixture-of-experts kernels in plain PyTorch: the ground truth for parity.

They follow vLLM's CUDA kernels (``csrc/moe``) output for output, including the parts a caller
reads back (token_expert_indices, the padding of moe_align_block_size), so any backend can be
compared with them exactly where results are integers.
"""

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import is_fake


def topk_softmax(
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    token_expert_indices: torch.Tensor,
    gating_output: torch.Tensor,
    renormalize: bool = False,
    e_score_correction_bias: torch.Tensor | None = None,
    is_padding: torch.Tensor | None = None,
) -> None:
    """Softmax in float32, top-k (bias only for the choice), k-major token_expert_indices."""
    scores = torch.softmax(gating_output.to(torch.float32), dim=-1)
    k = topk_weights.shape[-1]
    if e_score_correction_bias is None:
        weights, ids = torch.topk(scores, k, dim=-1)
    else:
        biased = scores + e_score_correction_bias.to(torch.float32)
        ids = torch.topk(biased, k, dim=-1).indices
        weights = scores.gather(-1, ids)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    num_tokens = gating_output.shape[0]
    slots = torch.arange(k, device=ids.device, dtype=torch.int64)[None, :] * num_tokens
    tokens = torch.arange(num_tokens, device=ids.device, dtype=torch.int64)[:, None]
    topk_weights.copy_(weights)
    topk_ids.copy_(ids)
    token_expert_indices.copy_(slots + tokens)


def moe_align_block_size(
    topk_ids: torch.Tensor,
    num_experts: int,
    block_size: int,
    sorted_token_ids: torch.Tensor,
    experts_ids: torch.Tensor,
    num_tokens_post_pad: torch.Tensor,
    expert_map: torch.Tensor | None = None,
    scatter_idx: torch.Tensor | None = None,
) -> None:
    """Stable sort of the flattened pairs by expert, each expert's run padded to block_size."""
    if scatter_idx is not None:
        raise NotImplementedError("reference moe_align_block_size: scatter_idx is not supported")
    flat = topk_ids.reshape(-1).to(torch.int64)
    numel = flat.numel()
    counts = torch.bincount(flat, minlength=num_experts)[:num_experts]
    padded = (counts + block_size - 1) // block_size * block_size
    starts = torch.cumsum(padded, 0) - padded
    total = int(padded.sum())
    order = torch.argsort(flat, stable=True)
    sorted_experts = flat[order]
    first_of_expert = torch.cumsum(counts, 0) - counts
    rank_in_expert = torch.arange(numel, device=flat.device) - first_of_expert[sorted_experts]
    positions = starts[sorted_experts] + rank_in_expert
    sorted_token_ids.fill_(numel)
    sorted_token_ids[positions] = order.to(sorted_token_ids.dtype)
    blocks = torch.repeat_interleave(
        torch.arange(num_experts, device=flat.device), padded // block_size
    )
    if expert_map is not None:
        blocks = expert_map.to(blocks.device)[blocks].to(torch.int64)
    experts_ids.fill_(-1)
    experts_ids[: blocks.numel()] = blocks.to(experts_ids.dtype)
    num_tokens_post_pad.fill_(total)


def moe_sum(
    input: torch.Tensor,
    output: torch.Tensor,
    topk_ids: torch.Tensor | None = None,
    expert_map: torch.Tensor | None = None,
) -> None:
    """output = sum over the k slots of input (slots of experts on other ranks skipped)."""
    values = input
    if expert_map is not None and topk_ids is not None:
        local = expert_map[topk_ids.to(torch.int64)] >= 0
        values = torch.where(local[..., None], input, torch.zeros_like(input))
    output.copy_(values.sum(dim=1))


# SwiGLU as GPT-OSS computes it (vLLM's SwigluOAIAndMul and the swigluoai_and_mul kernel it calls
# for MoE without arguments): gate and up interleaved, the gate clamped above, up on both sides.
SWIGLUOAI_ALPHA = 1.702
SWIGLUOAI_LIMIT = 7.0
# vLLM's swiglustep_and_mul for MoE: silu(gate) clamped above, up on both sides, halves packed.
SWIGLUSTEP_LIMIT = 7.0


#: the gate's function of the activations that multiply it by up, halves packed [gates; ups]
GATE_ACTIVATIONS = {
    "silu": F.silu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
}


def _gated(act):
    """``act(gate) * up`` of [..., 2d] laid out as [gates; ups] (vLLM's *_and_mul)."""

    def apply(x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1] // 2
        return act(x[..., :d]) * x[..., d:]

    return apply


def swigluoai(x: torch.Tensor) -> torch.Tensor:
    """GPT-OSS's SwiGLU of [..., 2d], gate and up interleaved ([g0, u0, g1, u1, ...])."""
    gate = x[..., ::2].clamp(max=SWIGLUOAI_LIMIT)
    up = x[..., 1::2].clamp(min=-SWIGLUOAI_LIMIT, max=SWIGLUOAI_LIMIT)
    return (up + 1) * (gate * torch.sigmoid(gate * SWIGLUOAI_ALPHA))


def swiglustep(x: torch.Tensor) -> torch.Tensor:
    """silu(gate).clamp(max=7) * up.clamp(-7, 7) of [..., 2d] laid out as [gates; ups]."""
    d = x.shape[-1] // 2
    gate = F.silu(x[..., :d]).clamp(max=SWIGLUSTEP_LIMIT)
    return gate * x[..., d:].clamp(min=-SWIGLUSTEP_LIMIT, max=SWIGLUSTEP_LIMIT)


def _relu2(x: torch.Tensor) -> torch.Tensor:
    return torch.square(F.relu(x))


#: vLLM's MoE activations (``MoEActivation`` values) -> the function of w1's output. The gated
#: ones take [..., 2 * intermediate]; the ``_no_mul`` ones (w1 of [experts, intermediate, hidden])
#: act on it whole. ``swigluoai_uninterleave`` and ``situ`` are absent: they need the layer's
#: clamp limit or betas, which this op does not take.
ACTIVATIONS = {
    **{name: _gated(gate) for name, gate in GATE_ACTIVATIONS.items()},
    "swigluoai": swigluoai,
    "swiglustep": swiglustep,
    "silu_no_mul": F.silu,
    "gelu_no_mul": F.gelu,
    "gelu_tanh_no_mul": lambda x: F.gelu(x, approximate="tanh"),
    "relu2_no_mul": _relu2,
}
# vLLM reads "gelu_pytorch_tanh" (a Hugging Face config's name) as gelu_tanh
ACTIVATIONS["gelu_pytorch_tanh"] = ACTIVATIONS["gelu_tanh"]


def fused_experts(
    hidden_states: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    activation: str = "silu",
    apply_router_weight_on_input: bool = False,
    global_num_experts: int = -1,
    expert_map: torch.Tensor | None = None,
    w1_bias: torch.Tensor | None = None,
    w2_bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Each expert on the tokens routed to it; the weighted sum accumulated in float32."""
    act = ACTIVATIONS.get(activation)
    if act is None:
        raise NotImplementedError(
            f"reference fused_experts: activation {activation!r} (supported: {sorted(ACTIVATIONS)})"
        )
    num_tokens, k = topk_ids.shape
    if is_fake(hidden_states):
        # As the fake of an opaque backend's custom op (Dynamo, opcheck) only the result's shape
        # counts, and which experts a token uses is data the fake does not have.
        return hidden_states.new_empty(num_tokens, w2.shape[1])
    out = torch.zeros(num_tokens, w2.shape[1], dtype=torch.float32, device=hidden_states.device)
    flat_ids = topk_ids.reshape(-1).to(torch.int64)
    flat_weights = topk_weights.reshape(-1).to(torch.float32)
    token_of = torch.arange(num_tokens, device=flat_ids.device).repeat_interleave(k)
    for expert in torch.unique(flat_ids).tolist():
        local = expert if expert_map is None else int(expert_map[expert])
        if local < 0:
            continue
        pairs = (flat_ids == expert).nonzero().squeeze(-1)
        tokens = token_of[pairs]
        x = hidden_states[tokens]
        weight = flat_weights[pairs][:, None]
        if apply_router_weight_on_input:
            x = (x.to(torch.float32) * weight).to(hidden_states.dtype)
        gate_up = x @ w1[local].t()
        if w1_bias is not None:
            gate_up = gate_up + w1_bias[local]
        h = act(gate_up) @ w2[local].t()
        if w2_bias is not None:
            h = h + w2_bias[local]
        h = h.to(torch.float32)
        if not apply_router_weight_on_input:
            h = h * weight
        out.index_add_(0, tokens, h)
    return out.to(hidden_states.dtype)


def topk_softmax_canonical(
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    token_expert_indices: torch.Tensor,
    gating_output: torch.Tensor,
    renormalize: bool = False,
    e_score_correction_bias: torch.Tensor | None = None,
    is_padding: torch.Tensor | None = None,
) -> tuple[torch.Tensor, ...]:
    """What two topk_softmax results must agree on: experts whose logits tie (common in half
    precision) may be chosen and ordered either way, so each token's weights and the logits of
    its chosen experts are compared sorted, and token_expert_indices as they are."""
    chosen = gating_output.to(torch.float32).gather(-1, topk_ids.to(torch.int64))
    return (
        topk_weights.sort(dim=-1, descending=True).values,
        chosen.sort(dim=-1, descending=True).values,
        token_expert_indices,
    )


def moe_align_block_size_canonical(
    topk_ids: torch.Tensor,
    num_experts: int,
    block_size: int,
    sorted_token_ids: torch.Tensor,
    experts_ids: torch.Tensor,
    num_tokens_post_pad: torch.Tensor,
    expert_map: torch.Tensor | None = None,
    scatter_idx: torch.Tensor | None = None,
) -> tuple[torch.Tensor, ...]:
    """What two alignments must agree on: the padded length, the expert of every used block, and
    which pairs (and how much padding) each expert's blocks hold. The order of the pairs inside an
    expert's run is open (GPU kernels place them with atomics), and so is everything past the
    padded length."""
    total = int(num_tokens_post_pad.reshape(-1)[0])
    experts = experts_ids[: total // block_size].to(torch.int64)
    slot_expert = experts.repeat_interleave(block_size)
    pairs = sorted_token_ids[:total].to(torch.int64)
    keyed = slot_expert * (topk_ids.numel() + 1) + pairs
    return num_tokens_post_pad.reshape(-1)[:1], experts, keyed.sort().values


def grouped_topk(
    scores: torch.Tensor,
    num_expert_group: int,
    topk_group: int,
    topk: int,
    renormalize: bool,
    routed_scaling_factor: float,
    bias: torch.Tensor,
    scoring_func: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's native grouped top-k with a correction bias (``grouped_topk_router``), in float32."""
    if scoring_func not in (0, 1):
        raise NotImplementedError(f"reference grouped_topk: scoring_func {scoring_func}")
    scores = scores.to(torch.float32)
    if scoring_func == 1:
        scores = scores.sigmoid()
    num_tokens, num_experts = scores.shape
    biased = scores + bias.to(torch.float32).unsqueeze(0)
    groups = biased.view(num_tokens, num_expert_group, -1)
    group_scores = groups.topk(2, dim=-1).values.sum(dim=-1)
    chosen_groups = group_scores.topk(topk_group, dim=-1).indices
    group_mask = torch.zeros_like(group_scores).scatter_(1, chosen_groups, 1.0)
    expert_mask = group_mask.unsqueeze(-1).expand_as(groups).reshape(num_tokens, num_experts)
    ids = biased.masked_fill(expert_mask == 0, float("-inf")).topk(topk, dim=-1).indices
    weights = scores.gather(1, ids)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return (weights * routed_scaling_factor).to(torch.float32), ids.to(torch.int32)


def grouped_topk_canonical(
    result: tuple[torch.Tensor, torch.Tensor],
    scores: torch.Tensor,
    num_expert_group: int,
    topk_group: int,
    topk: int,
    renormalize: bool,
    routed_scaling_factor: float,
    bias: torch.Tensor,
    scoring_func: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """What two grouped_topk results must agree on: the order of a token's k experts is open, so
    each row is sorted by expert index (indices compared exactly, weights with the tolerance)."""
    weights, ids = result
    order = ids.to(torch.int64).argsort(dim=-1)
    return weights.gather(-1, order), ids.gather(-1, order)

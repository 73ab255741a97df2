"""Reference quantized MoE experts in plain PyTorch: the ground truth of ``fused_experts_quant``.

The weights are dequantised to float32 in the layout vLLM's Triton experts read them (block,
channel or expert scales; packed 4-bit values with group scales and zero points). The activations
are quantised as the scheme's kernels quantise them (W8A8: per token group of ``block_k``, per
token or per tensor, static or dynamic; W8A16 / W4A16: not at all) and dequantised again, so the
GEMMs multiply the same values the kernels do and accumulate in float32. Like the kernels, the
first GEMM's output and the activation are rounded to the hidden states' dtype before the second
GEMM; the top-k sum accumulates in float32.
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import is_fake

from vllm_fl.backends.reference.impl.moe import GATE_ACTIVATIONS as _ACTIVATIONS
from vllm_fl.backends.reference.impl.moe import fused_experts
from vllm_fl.dispatch import check_shape

OP = "fused_experts_quant"
W8A8 = ("fp8_w8a8", "int8_w8a8")
W_ONLY = ("int8_w8a16", "int4_w4a16")
QUANT_TYPES = (*W8A8, *W_ONLY)

_FP8 = torch.float8_e4m3fn
_FP8_MAX = torch.finfo(_FP8).max
_I8_MIN, _I8_MAX = -128, 127
# vLLM's activation quantisers keep a scale off zero (an all-zero group quantises to zeros)
_EPS = 1e-10


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _unpack_nibbles(packed: torch.Tensor, dim: int) -> torch.Tensor:
    """Two 4-bit values per byte along ``dim`` (the even index in the low nibble) -> int32."""
    values = packed.to(torch.int32)
    low, high = values & 0xF, (values >> 4) & 0xF
    return torch.stack((low, high), dim=dim + 1).flatten(dim, dim + 1)


def _expand_blocks(scale: torch.Tensor, block_n: int, block_k: int, n: int, k: int):
    """Block scales [E, ceil(N / bn), ceil(K / bk)] -> one per weight element [E, N, K]."""
    return scale.repeat_interleave(block_n, dim=1)[:, :n].repeat_interleave(block_k, dim=2)[
        :, :, :k
    ]


def _w8a8_weight(w, scale, arg, block_n, block_k):
    """fp8 / int8 weights [E, N, K] times their block, channel or expert scales, in float32."""
    e, n, k = w.shape
    scale = scale.to(torch.float32)
    if block_n > 0 and block_k > 0:
        check_shape(OP, f"{arg}_scale", scale, (e, _cdiv(n, block_n), _cdiv(k, block_k)))
        return w.to(torch.float32) * _expand_blocks(scale, block_n, block_k, n, k)
    if scale.numel() == e:
        return w.to(torch.float32) * scale.reshape(e, 1, 1)
    if scale.dim() == 2:
        check_shape(OP, f"{arg}_scale", scale, (e, n))
    else:
        check_shape(OP, f"{arg}_scale", scale, (e, n, 1))
    return w.to(torch.float32) * scale.reshape(e, n, 1)


def _weight_only(w, scale, zp, arg, quant_type, block_k, k):
    """int8 / packed int4 weights with channel or group scales (and zero points), in float32."""
    e, n = w.shape[:2]
    scale = scale.to(torch.float32)
    if quant_type == "int8_w8a16" and block_k == 0:
        if scale.dim() == 2:
            check_shape(OP, f"{arg}_scale", scale, (e, n))
        else:
            check_shape(OP, f"{arg}_scale", scale, (e, n, 1))
        return w.to(torch.float32) * scale.reshape(e, n, 1)
    if block_k <= 0:
        raise ValueError(
            f"{OP}: quant_type {quant_type!r} needs the group size as block_k, got {block_k}"
        )
    if quant_type == "int4_w4a16":
        check_shape(OP, arg, w, (e, n, _cdiv(k, 2)))
        values = _unpack_nibbles(w, dim=2)[:, :, :k]
        offset = 8
    else:
        check_shape(OP, arg, w, (e, n, k))
        values = w.to(torch.int32)
        offset = 128
    groups = _cdiv(k, block_k)
    check_shape(OP, f"{arg}_scale", scale, (e, n, groups))
    if zp is None:
        zero = torch.tensor(float(offset))
    else:
        if quant_type == "int4_w4a16":
            check_shape(OP, f"{arg}_zp", zp, (e, _cdiv(n, 2), groups))
            zp = _unpack_nibbles(zp.transpose(1, 2), dim=2)[:, :, :n].transpose(1, 2)
        else:
            check_shape(OP, f"{arg}_zp", zp, (e, n, groups))
        zero = zp.to(torch.float32).repeat_interleave(block_k, dim=2)[:, :, :k]
    return (values.to(torch.float32) - zero) * scale.repeat_interleave(block_k, dim=2)[:, :, :k]


def _fake_quantise(
    x: torch.Tensor,
    quant_type: str,
    static_scale: torch.Tensor | None,
    per_act_token: bool,
    block_k: int,
    scale_arg: str,
) -> torch.Tensor:
    """x [rows, K] quantised as the W8A8 kernels quantise their input, dequantised again."""
    xf = x.to(torch.float32)
    fp8 = quant_type == "fp8_w8a8"
    qmax = _FP8_MAX if fp8 else _I8_MAX

    def quantise(values: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        if fp8:
            q = (values / scale).clamp(-_FP8_MAX, _FP8_MAX).to(_FP8).to(torch.float32)
        else:
            q = torch.round(values / scale).clamp(_I8_MIN, _I8_MAX)
        return q * scale

    if static_scale is not None and block_k == 0 and not per_act_token:
        check_shape(OP, scale_arg, static_scale, (1,), numel=True)
        return quantise(xf, static_scale.to(torch.float32).reshape(()))
    if block_k > 0:
        rows, k = xf.shape
        pad = _cdiv(k, block_k) * block_k - k
        groups = torch.nn.functional.pad(xf, (0, pad)).reshape(rows, -1, block_k)
        scale = groups.abs().amax(dim=-1, keepdim=True).clamp(min=_EPS) / qmax
        return quantise(groups, scale).reshape(rows, -1)[:, :k]
    if per_act_token:
        scale = xf.abs().amax(dim=-1, keepdim=True).clamp(min=_EPS) / qmax
        return quantise(xf, scale)
    return quantise(xf, xf.abs().amax().clamp(min=_EPS) / qmax)


def _check_arguments(hidden_states, w1, w2, quant_type, activation, block_n, block_k):
    if quant_type not in QUANT_TYPES:
        raise ValueError(f"{OP}: quant_type is {quant_type!r}, expected one of {list(QUANT_TYPES)}")
    if activation not in _ACTIVATIONS:
        raise NotImplementedError(
            f"reference {OP}: activation {activation!r} (supported: {sorted(_ACTIVATIONS)})"
        )
    if block_n < 0 or block_k < 0 or (quant_type in W8A8 and (block_n > 0) != (block_k > 0)):
        raise ValueError(
            f"{OP}: block shape [{block_n}, {block_k}] for {quant_type!r}, expected both > 0 "
            "(block scales) or both 0 (channel or expert scales)"
        )
    hidden = hidden_states.shape[-1]
    packed = 2 if quant_type == "int4_w4a16" else 1
    check_shape(OP, "hidden_states", hidden_states, (None, w1.shape[-1] * packed))
    check_shape(OP, "w2", w2, (w1.shape[0], hidden, None))


def fused_experts_quant(
    hidden_states: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    quant_type: str,
    w1_scale: torch.Tensor,
    w2_scale: torch.Tensor,
    a1_scale: torch.Tensor | None = None,
    a2_scale: torch.Tensor | None = None,
    w1_zp: torch.Tensor | None = None,
    w2_zp: torch.Tensor | None = None,
    block_n: int = 0,
    block_k: int = 0,
    per_act_token: bool = False,
    activation: str = "silu",
    apply_router_weight_on_input: bool = False,
    global_num_experts: int = -1,
    expert_map: torch.Tensor | None = None,
) -> torch.Tensor:
    """Dequantised experts on the (fake-)quantised activations of every (token, slot) pair,
    weighted and summed per token in float32."""
    _check_arguments(hidden_states, w1, w2, quant_type, activation, block_n, block_k)
    num_tokens, k = topk_ids.shape
    if is_fake(hidden_states):
        # As the fake of an opaque backend's custom op only the result's shape counts.
        return hidden_states.new_empty(num_tokens, w2.shape[1])
    dtype = hidden_states.dtype
    hidden = hidden_states.shape[-1]
    intermediate = w2.shape[-1] * (2 if quant_type == "int4_w4a16" else 1)
    if quant_type in W8A8:
        w1f = _w8a8_weight(w1, w1_scale, "w1", block_n, block_k)
        w2f = _w8a8_weight(w2, w2_scale, "w2", block_n, block_k)
    else:
        w1f = _weight_only(w1, w1_scale, w1_zp, "w1", quant_type, block_k, hidden)
        w2f = _weight_only(w2, w2_scale, w2_zp, "w2", quant_type, block_k, intermediate)

    def activations(x: torch.Tensor, static_scale: torch.Tensor | None, arg: str) -> torch.Tensor:
        if quant_type in W8A8:
            return _fake_quantise(x, quant_type, static_scale, per_act_token, block_k, arg)
        return x.to(torch.float32)

    flat_ids = topk_ids.reshape(-1).to(torch.int64)
    flat_weights = topk_weights.reshape(-1).to(torch.float32)
    token_of = torch.arange(num_tokens, device=flat_ids.device).repeat_interleave(k)
    x1 = activations(hidden_states, a1_scale, "a1_scale")
    experts = [
        (expert, local)
        for expert in torch.unique(flat_ids).tolist()
        for local in [expert if expert_map is None else int(expert_map[expert])]
        if local >= 0
    ]
    # Every pair's activated intermediate first: a dynamic per-tensor scale of the second GEMM's
    # input covers all of them (pairs of experts on other ranks stay zero, as in the kernels).
    act = _ACTIVATIONS[activation]
    inter = torch.zeros(num_tokens * k, w1f.shape[1] // 2, dtype=dtype, device=x1.device)
    pairs_of = {}
    for expert, local in experts:
        pairs = (flat_ids == expert).nonzero().squeeze(-1)
        pairs_of[expert] = pairs
        gate_up = x1[token_of[pairs]] @ w1f[local].t()
        if apply_router_weight_on_input:
            # as vLLM's Triton experts: the routing weight scales the first GEMM's output
            gate_up = gate_up * flat_weights[pairs][:, None]
        gate_up = gate_up.to(dtype).to(torch.float32)
        d = gate_up.shape[-1] // 2
        inter[pairs] = (act(gate_up[:, :d]) * gate_up[:, d:]).to(dtype)
    x2 = activations(inter, a2_scale, "a2_scale")
    out = torch.zeros(num_tokens, w2f.shape[1], dtype=torch.float32, device=x1.device)
    for expert, local in experts:
        pairs = pairs_of[expert]
        h = x2[pairs] @ w2f[local].t()
        if not apply_router_weight_on_input:
            h = h * flat_weights[pairs][:, None]
        out.index_add_(0, token_of[pairs], h.to(dtype).to(torch.float32))
    return out.to(dtype)


def fused_experts_quant_round_trip(
    originals: dict[str, torch.Tensor], arguments: dict[str, object]
) -> torch.Tensor:
    """What ``fused_experts_quant`` approximates: the unquantized experts (``fused_experts``) on
    the weights before quantisation."""
    return fused_experts(
        arguments["hidden_states"],
        originals["w1"].to(arguments["hidden_states"].dtype),
        originals["w2"].to(arguments["hidden_states"].dtype),
        arguments["topk_weights"],
        arguments["topk_ids"],
        arguments.get("activation", "silu"),
        arguments.get("apply_router_weight_on_input", False),
        arguments.get("global_num_experts", -1),
        arguments.get("expert_map"),
    )

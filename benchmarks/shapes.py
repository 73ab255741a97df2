"""How each op's test cases scale to the model sizes the kernel benchmarks run at.

`OP_SIZES` is the only op-specific knowledge of the benchmarks: which numbers of an op's ops.yaml
test case stand for which model size (`vllm_fl.testing.models.ModelShape`). cases.py builds every
op's benchmark inputs from its test case with those numbers replaced; an op without an entry runs
at its test case's sizes, with its token count scaled, so a new op in ops.yaml gets benchmark rows
without a change here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from vllm_fl.testing.models import ModelShape, model_shape

#: a model size as a function of the model and the benchmark's token count
Size = Callable[[ModelShape, int], "int | float"]


def size(attr: str, times: int = 1) -> Size:
    """The model's `attr` (a ModelShape field or property), times `times`."""

    def get(model: ModelShape, tokens: int) -> int | float:
        value = getattr(model, attr)
        if value is None:
            raise ValueError(f"model {model.name!r} has no {attr}")
        return value * times

    return get


MOE_BLOCK = 64  # the block_size of moe_align_block_size's benchmarked test case


def _aligned_len(model: ModelShape, tokens: int) -> int:
    """Length of moe_align_block_size's sorted_token_ids, as vLLM's fused MoE allocates it."""
    pairs = tokens * model.top_k
    padded = pairs + model.experts * (MOE_BLOCK - 1)
    return min(pairs * MOE_BLOCK, padded) if pairs < model.experts else padded


def _aligned_blocks(model: ModelShape, tokens: int) -> int:
    return -(-_aligned_len(model, tokens) // MOE_BLOCK)


@dataclass(frozen=True)
class OpSizes:
    """How an op's ops.yaml test cases scale to a model.

    `sizes` maps a number of the test case (a tensor dimension, an integer tensor's bound, an
    int or float argument of the constructor or the call; never a bool) to a model size; a key
    `(argument, axis)` maps one dimension where the case uses one number for two sizes. The
    case's token count (the first dimension of its first tensor) becomes the benchmark's in the
    first dimension of every tensor that has it. `cases`: the indices of the test cases that are
    benchmarked (default: the first case of each set of given arguments). `model`: a MODELS key,
    or None where the case already has a real model's sizes.
    """

    model: str | None
    sizes: Mapping[object, Size]
    cases: tuple[int, ...] | None = None

    def shape(self) -> ModelShape | None:
        return None if self.model is None else model_shape(self.model)


_GATED = OpSizes("llama3-8b", {256: size("intermediate", 2)})
_ACTIVATION = OpSizes("llama3-8b", {256: size("intermediate")})
_NORM = OpSizes("llama3-8b", {256: size("hidden")})

#: op -> how its test cases scale; every key must occur in the op's benchmarked test cases
OP_SIZES: dict[str, OpSizes] = {
    "silu_and_mul": _GATED,
    "mul_and_silu": _GATED,
    # the tanh approximation (case 1), which Gemma's GeluAndMul uses
    "gelu_and_mul": OpSizes("llama3-8b", {256: size("intermediate", 2)}, cases=(1,)),
    "gelu_new": _ACTIVATION,
    "gelu_fast": _ACTIVATION,
    "quick_gelu": _ACTIVATION,
    "rms_norm": _NORM,
    "gemma_rms_norm": _NORM,
    # with a key and the whole head rotated (case 0), as every Llama decoder layer calls it
    "rotary_embedding": OpSizes(
        "llama3-8b",
        {
            64: size("head_dim"),
            512: size("max_positions"),
            10000.0: size("rope_theta"),
            256: size("q_size"),
            128: size("kv_size"),
        },
        cases=(0,),
    ),
    # case 1: renormalised, with more tokens than the token-count 1 that other numbers share
    "topk_softmax": OpSizes("qwen3-moe", {8: size("top_k"), 128: size("experts")}, cases=(1,)),
    # case 3: block_size 64, what vLLM's fused MoE uses at these sizes
    "moe_align_block_size": OpSizes(
        "qwen3-moe",
        {8: size("top_k"), 128: size("experts"), 24448: _aligned_len, 382: _aligned_blocks},
        cases=(3,),
    ),
    "moe_sum": OpSizes("qwen3-moe", {2: size("top_k"), 256: size("hidden")}),
    # DeepSeek-V3's routing (256 experts in 8 groups, 4 groups, top-8), as case 1 has it
    "grouped_topk": OpSizes(None, {}, cases=(1,)),
    # w1 is [experts, 2 * intermediate, hidden]; the case's 128 is both of the latter two
    "fused_experts": OpSizes(
        "qwen3-moe",
        {
            2: size("top_k"),
            8: size("experts"),
            64: size("moe_intermediate"),
            128: size("hidden"),
            ("w1", 1): size("moe_intermediate", 2),
        },
    ),
}

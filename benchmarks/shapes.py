"""The model sizes the benchmarks run at, in one table, and how each op's test cases scale to them.

`MODELS` holds each model's Hugging Face config: bench_e2e writes it as config.json and lets vLLM
load dummy weights; `ModelShape` reads from it the sizes the kernel benchmarks need. `OP_SIZES`
is the only op-specific knowledge of the benchmarks: which numbers of an op's ops.yaml test case
stand for which model size. cases.py builds every op's benchmark inputs from its test case with
those numbers replaced; an op without an entry runs at its test case's sizes, with its token count
scaled, so a new op in ops.yaml gets benchmark rows without a change here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "hidden_act": "silu",
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
}

# Qwen3-30B-A3B's shape (48 layers there; bench_e2e's --layers keeps fewer so dummy weights start
# fast).
QWEN3_MOE = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "norm_topk_prob": True,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "hidden_act": "silu",
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
}

#: model name (bench_e2e's --shape) -> Hugging Face config
MODELS: dict[str, dict] = {"llama3-8b": LLAMA3_8B, "qwen3-moe": QWEN3_MOE}


@dataclass(frozen=True)
class ModelShape:
    """The sizes of one model that kernel inputs are made of."""

    name: str
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    max_positions: int
    rope_theta: float
    experts: int | None = None
    top_k: int | None = None
    moe_intermediate: int | None = None

    @classmethod
    def from_config(cls, name: str, config: Mapping) -> ModelShape:
        heads = config["num_attention_heads"]
        return cls(
            name=name,
            hidden=config["hidden_size"],
            intermediate=config["intermediate_size"],
            heads=heads,
            kv_heads=config["num_key_value_heads"],
            head_dim=config.get("head_dim", config["hidden_size"] // heads),
            max_positions=config["max_position_embeddings"],
            rope_theta=config["rope_theta"],
            experts=config.get("num_experts"),
            top_k=config.get("num_experts_per_tok"),
            moe_intermediate=config.get("moe_intermediate_size"),
        )

    @property
    def q_size(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.kv_heads * self.head_dim


#: Checkpoint formats a shape can be run in: the ``quantization_config`` a quantized checkpoint of
#: that format ships (with dummy weights vLLM creates the quantized parameters of the format).
QUANTIZATIONS: dict[str, dict] = {
    # Qwen3-FP8 and DeepSeek-V3: 128x128 weight blocks, activations per 1x128 group
    "fp8-block": {
        "quant_method": "fp8",
        "activation_scheme": "dynamic",
        "weight_block_size": [128, 128],
    },
    # per-tensor weights, dynamic activations
    "fp8-tensor": {"quant_method": "fp8", "activation_scheme": "dynamic"},
    # compressed-tensors INT8 W8A8: per-channel weights, dynamic per-token activations
    "int8-w8a8": {
        "quant_method": "compressed-tensors",
        "format": "int-quantized",
        "quantization_status": "compressed",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {
                    "num_bits": 8,
                    "type": "int",
                    "symmetric": True,
                    "strategy": "channel",
                    "dynamic": False,
                },
                "input_activations": {
                    "num_bits": 8,
                    "type": "int",
                    "symmetric": True,
                    "strategy": "token",
                    "dynamic": True,
                },
            }
        },
        "ignore": ["lm_head"],
    },
    # GPTQ 4-bit weights, groups of 128 (W4A16)
    "w4a16-gptq": {
        "quant_method": "gptq",
        "bits": 4,
        "group_size": 128,
        "desc_act": False,
        "sym": True,
    },
}


def model_config(name: str, layers: int | None = None, quant: str | None = None) -> dict:
    """The Hugging Face config of model `name`, with `layers` decoder layers if given, as a
    checkpoint of format `quant` (a key of QUANTIZATIONS) if given."""
    config = dict(MODELS[name])
    if layers:
        config["num_hidden_layers"] = layers
    if quant:
        config["quantization_config"] = QUANTIZATIONS[quant]
    return config


def model_shape(name: str) -> ModelShape:
    return ModelShape.from_config(name, MODELS[name])


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

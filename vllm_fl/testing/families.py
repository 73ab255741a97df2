"""The model families vLLM serves, each at the size of one real model of the family.

`FAMILIES` maps a family (vLLM's name for its model code: ``llama``, ``qwen3_moe``, ...) to a
`Family`: the Hugging Face config of a real model of that family at full size (hidden size,
heads, key/value heads, intermediate and expert sizes, vocabulary, RoPE scaling), the tiny
random checkpoint of the family that `vllm_fl.testing.models` builds for a CPU, and how to cut
the model to a few layers while keeping each kind of layer it has (a hybrid model's Mamba,
attention and MLP layers, Gemma3's sliding and global attention, DeepSeek's dense and MoE
layers). `Family.write_checkpoint` writes the cut config as a model directory whose weights vLLM
makes up (``load_format="dummy"``); `benchmarks.families` runs them.

The configs are the published ``config.json`` of the model named in `Family.model`, in the
legacy keys (``rope_theta``, ``rope_scaling``) that every transformers release reads; sizes
that only a checkpoint's weights need (dropout, initialiser range) are left to the defaults.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from vllm_fl.testing import models
from vllm_fl.testing.models import DEEPSEEK_V3_2L, QWEN3_MOE

#: decoder layers a family's checkpoint keeps unless told otherwise
DEFAULT_LAYERS = 2


@dataclass(frozen=True)
class Family:
    """One model family: a real model's config at full size and how to cut it to few layers."""

    name: str
    #: the real model whose config `config` is
    model: str
    config: Mapping[str, object]
    #: the family's tiny random checkpoint (a directory in, the model's directory out), if any
    tiny: Callable[[Path], Path] | None = None
    #: vLLM runs it as an embedding model (``runner="pooling"``), not a generator
    embedding: bool = False
    #: the dtype of the tiny model on a CPU (vLLM's CPU kernels of some layers take one only)
    tiny_dtype: str = "float32"
    #: the fewest layers that hold every kind of layer of the family
    min_layers: int = 1
    #: config keys for `n` layers beside ``num_hidden_layers``: the layer kinds kept
    cut: Callable[[int], dict] = field(default=lambda n: {})

    @property
    def model_type(self) -> str:
        return str(self.config["model_type"])

    @property
    def vocab_size(self) -> int:
        return int(self.config["vocab_size"])

    def checkpoint_config(self, layers: int = DEFAULT_LAYERS) -> dict:
        """`config` with `layers` layers (at least `min_layers`), every kind of layer kept."""
        layers = max(layers, self.min_layers)
        return {**self.config, "num_hidden_layers": layers, **self.cut(layers)}

    def write_checkpoint(self, path: str | Path, layers: int = DEFAULT_LAYERS) -> Path:
        """A model directory holding only the config.json of `checkpoint_config(layers)`: vLLM
        makes up the weights (``load_format="dummy"``)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.checkpoint_config(layers), indent=1)
        (path / "config.json").write_text(text + "\n")
        return path


def _alternating(first: str, second: str) -> Callable[[int], dict]:
    """``layer_types`` alternating `first` and `second` (Gemma2's and GPT-OSS's pattern)."""
    return lambda n: {"layer_types": [first if i % 2 == 0 else second for i in range(n)]}


def _last_global(local: str, full: str, interval_key: str | None = None) -> Callable[[int], dict]:
    """``layer_types`` of `n` - 1 `local` layers then one `full` one (Gemma3 keeps one global
    layer in six, Qwen3-Next one full attention in four: a cut to two layers keeps both)."""

    def cut(n: int) -> dict:
        keys: dict = {"layer_types": [local] * (n - 1) + [full]}
        if interval_key is not None:
            keys[interval_key] = n
        return keys

    return cut


def _first_dense(n: int) -> dict:
    """DeepSeek's first layer dense, the others MoE (the real models keep 1 or 3 dense)."""
    return {"first_k_dense_replace": min(1, n - 1)}


def _nemotron_pattern(n: int) -> dict:
    """Nemotron-H's layer string: Mamba, MLP and attention (``M-*``) over and over."""
    return {"hybrid_override_pattern": ("M-*" * n)[:n]}


# -- the families -----------------------------------------------------------------------------------

_LLAMA_31_8B = {
    **models.LLAMA3_8B,
    "max_position_embeddings": 131072,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    "eos_token_id": [128001, 128008, 128009],
}

_QWEN2_7B = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "vocab_size": 152064,
    "max_position_embeddings": 131072,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "use_sliding_window": False,
    "sliding_window": 131072,
    "max_window_layers": 28,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 151643,
    "eos_token_id": 151643,
}

_QWEN3_8B = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "attention_bias": False,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 151643,
    "eos_token_id": 151645,
}

_MISTRAL_7B = {
    "architectures": ["MistralForCausalLM"],
    "model_type": "mistral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 32768,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-5,
    "hidden_act": "silu",
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
}

_GEMMA2_9B = {
    "architectures": ["Gemma2ForCausalLM"],
    "model_type": "gemma2",
    "hidden_size": 3584,
    "intermediate_size": 14336,
    "num_hidden_layers": 42,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 256,
    "query_pre_attn_scalar": 256,
    "vocab_size": 256000,
    "max_position_embeddings": 8192,
    "rope_theta": 10000.0,
    "rms_norm_eps": 1e-6,
    "hidden_activation": "gelu_pytorch_tanh",
    "sliding_window": 4096,
    "attn_logit_softcapping": 50.0,
    "final_logit_softcapping": 30.0,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "bos_token_id": 2,
    "eos_token_id": 1,
    "pad_token_id": 0,
}

_GEMMA3_4B_TEXT = {
    "architectures": ["Gemma3ForCausalLM"],
    "model_type": "gemma3_text",
    "hidden_size": 2560,
    "intermediate_size": 10240,
    "num_hidden_layers": 34,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "query_pre_attn_scalar": 256,
    "vocab_size": 262208,
    "max_position_embeddings": 131072,
    "rope_theta": 1000000.0,
    "rope_local_base_freq": 10000.0,
    "rope_scaling": {"rope_type": "linear", "factor": 8.0},
    "rms_norm_eps": 1e-6,
    "hidden_activation": "gelu_pytorch_tanh",
    "sliding_window": 1024,
    "sliding_window_pattern": 6,
    "final_logit_softcapping": None,
    "attn_logit_softcapping": None,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "bos_token_id": 2,
    "eos_token_id": 1,
    "pad_token_id": 0,
}

_PHI3_MINI = {
    "architectures": ["Phi3ForCausalLM"],
    "model_type": "phi3",
    "hidden_size": 3072,
    "intermediate_size": 8192,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "vocab_size": 32064,
    "max_position_embeddings": 4096,
    "original_max_position_embeddings": 4096,
    "rope_theta": 10000.0,
    "rms_norm_eps": 1e-5,
    "hidden_act": "silu",
    "sliding_window": 2047,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 32000,
    "pad_token_id": 32000,
}

_GPT2 = {
    "architectures": ["GPT2LMHeadModel"],
    "model_type": "gpt2",
    "n_embd": 768,
    "n_layer": 12,
    "n_head": 12,
    "n_inner": None,
    "n_positions": 1024,
    "n_ctx": 1024,
    "vocab_size": 50257,
    "activation_function": "gelu_new",
    "layer_norm_epsilon": 1e-5,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "bos_token_id": 50256,
    "eos_token_id": 50256,
}

_OPT_1_3B = {
    "architectures": ["OPTForCausalLM"],
    "model_type": "opt",
    "hidden_size": 2048,
    "ffn_dim": 8192,
    "num_hidden_layers": 24,
    "num_attention_heads": 32,
    "word_embed_proj_dim": 2048,
    "vocab_size": 50272,
    "max_position_embeddings": 2048,
    "do_layer_norm_before": True,
    "activation_function": "relu",
    "enable_bias": True,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "bos_token_id": 2,
    "eos_token_id": 2,
    "pad_token_id": 1,
}

_PYTHIA_1_4B = {
    "architectures": ["GPTNeoXForCausalLM"],
    "model_type": "gpt_neox",
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "vocab_size": 50304,
    "max_position_embeddings": 2048,
    "rotary_pct": 0.25,
    "rotary_emb_base": 10000,
    "use_parallel_residual": True,
    "hidden_act": "gelu",
    "layer_norm_eps": 1e-5,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 0,
    "eos_token_id": 0,
}

_FALCON_7B = {
    "architectures": ["FalconForCausalLM"],
    "model_type": "falcon",
    "hidden_size": 4544,
    "num_hidden_layers": 32,
    "num_attention_heads": 71,
    "multi_query": True,
    "parallel_attn": True,
    "new_decoder_architecture": False,
    "alibi": False,
    "bias": False,
    "vocab_size": 65024,
    "layer_norm_epsilon": 1e-5,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "bos_token_id": 11,
    "eos_token_id": 11,
}

_MIXTRAL_8X7B = {
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "vocab_size": 32000,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-5,
    "hidden_act": "silu",
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
}

_DEEPSEEK_V2_LITE = {
    "architectures": ["DeepseekV2ForCausalLM"],
    "model_type": "deepseek_v2",
    "hidden_size": 2048,
    "intermediate_size": 10944,
    "moe_intermediate_size": 1408,
    "num_hidden_layers": 27,
    "first_k_dense_replace": 1,
    "moe_layer_freq": 1,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "q_lora_rank": None,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "n_routed_experts": 64,
    "n_shared_experts": 2,
    "num_experts_per_tok": 6,
    "n_group": 1,
    "topk_group": 1,
    "topk_method": "greedy",
    "scoring_func": "softmax",
    "norm_topk_prob": False,
    "routed_scaling_factor": 1.0,
    "vocab_size": 102400,
    "max_position_embeddings": 163840,
    "rope_theta": 10000.0,
    "rope_scaling": {
        "type": "yarn",
        "factor": 40,
        "original_max_position_embeddings": 4096,
        "beta_fast": 32,
        "beta_slow": 1,
        "mscale": 0.707,
        "mscale_all_dim": 0.707,
    },
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 100000,
    "eos_token_id": 100001,
}

_DEEPSEEK_V3 = {
    **DEEPSEEK_V3_2L,
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "first_k_dense_replace": 3,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "n_routed_experts": 256,
    "vocab_size": 129280,
    "max_position_embeddings": 163840,
    "rope_scaling": {
        "type": "yarn",
        "factor": 40,
        "original_max_position_embeddings": 4096,
        "beta_fast": 32,
        "beta_slow": 1,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    },
    "bos_token_id": 0,
    "eos_token_id": 1,
}

_GPT_OSS_20B = {
    "architectures": ["GptOssForCausalLM"],
    "model_type": "gpt_oss",
    "hidden_size": 2880,
    "intermediate_size": 2880,
    "num_hidden_layers": 24,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "num_local_experts": 32,
    "num_experts_per_tok": 4,
    "experts_per_token": 4,
    "vocab_size": 201088,
    "max_position_embeddings": 131072,
    "sliding_window": 128,
    "attention_bias": True,
    "swiglu_limit": 7.0,
    "rope_theta": 150000.0,
    "rope_scaling": {
        "rope_type": "yarn",
        "factor": 32.0,
        "original_max_position_embeddings": 4096,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "truncate": False,
    },
    "rms_norm_eps": 1e-5,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "eos_token_id": 200002,
    "pad_token_id": 199999,
}

_QWEN3_NEXT_80B = {
    "architectures": ["Qwen3NextForCausalLM"],
    "model_type": "qwen3_next",
    "hidden_size": 2048,
    "intermediate_size": 5120,
    "num_hidden_layers": 48,
    "full_attention_interval": 4,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "partial_rotary_factor": 0.25,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "num_experts": 512,
    "num_experts_per_tok": 10,
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "norm_topk_prob": True,
    "vocab_size": 151936,
    "max_position_embeddings": 262144,
    "rope_theta": 10000000.0,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 151643,
    "eos_token_id": 151645,
}

_MAMBA2_2_7B = {
    "architectures": ["Mamba2ForCausalLM"],
    "model_type": "mamba2",
    "hidden_size": 2560,
    "num_hidden_layers": 64,
    "num_heads": 80,
    "head_dim": 64,
    "expand": 2,
    "n_groups": 1,
    "state_size": 128,
    "conv_kernel": 4,
    "chunk_size": 256,
    "vocab_size": 50288,
    "rms_norm": True,
    "norm_before_gate": False,
    "layer_norm_epsilon": 1e-5,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "bos_token_id": 0,
    "eos_token_id": 0,
    "pad_token_id": 0,
}

# Falcon-H1-7B: 44 layers of width 3072, each attention (12 heads of 128, 2 KV heads) beside a
# Mamba2 mixer (24 heads of 128, state 256) and an MLP
_FALCON_H1_7B = {
    "architectures": ["FalconH1ForCausalLM"],
    "model_type": "falcon_h1",
    "hidden_size": 3072,
    "intermediate_size": 12288,
    "num_hidden_layers": 44,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "mamba_d_ssm": 3072,
    "mamba_n_heads": 24,
    "mamba_d_head": 128,
    "mamba_n_groups": 1,
    "mamba_d_state": 256,
    "mamba_d_conv": 4,
    "mamba_expand": 2,
    "mamba_chunk_size": 128,
    "mamba_rms_norm": False,
    "vocab_size": 130049,
    "max_position_embeddings": 262144,
    "rope_theta": 1e11,
    "rms_norm_eps": 1e-5,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 11,
    "pad_token_id": 0,
}

_NEMOTRON_H_8B = {
    "architectures": ["NemotronHForCausalLM"],
    "model_type": "nemotron_h",
    "hidden_size": 4096,
    "intermediate_size": 21504,
    "num_hidden_layers": 52,
    "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "attention_head_dim": 128,
    "mamba_num_heads": 128,
    "mamba_head_dim": 64,
    "n_groups": 8,
    "ssm_state_size": 128,
    "conv_kernel": 4,
    "expand": 2,
    "chunk_size": 128,
    "mlp_hidden_act": "relu2",
    "vocab_size": 131072,
    "max_position_embeddings": 8192,
    "layer_norm_epsilon": 1e-5,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
}

_BERT_BASE = {
    "architectures": ["BertModel"],
    "model_type": "bert",
    "hidden_size": 768,
    "intermediate_size": 3072,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "vocab_size": 30522,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "hidden_act": "gelu",
    "layer_norm_eps": 1e-12,
    "position_embedding_type": "absolute",
    "torch_dtype": "bfloat16",
    "pad_token_id": 0,
}

# Qwen3-Embedding-0.6B: a Qwen3 decoder served as an embedding model (last-token pooling)
_QWEN3_EMBEDDING_0_6B = {
    **_QWEN3_8B,
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "vocab_size": 151669,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": True,
    "eos_token_id": 151643,
}


def _families(*families: Family) -> dict[str, Family]:
    return {family.name: family for family in families}


#: family name -> its real model's shape
FAMILIES: dict[str, Family] = _families(
    Family("llama", "Llama-3.1-8B", _LLAMA_31_8B, models.build_tiny_llama),
    Family("qwen2", "Qwen2-7B", _QWEN2_7B, models.build_tiny_qwen2),
    Family("qwen3", "Qwen3-8B", _QWEN3_8B, models.build_tiny_qwen3),
    Family(
        "mistral",
        "Mistral-7B-v0.3",
        _MISTRAL_7B,
        models.build_tiny_mistral,
    ),
    Family(
        "gemma2",
        "Gemma-2-9B",
        _GEMMA2_9B,
        models.build_tiny_gemma2,
        cut=_alternating("sliding_attention", "full_attention"),
    ),
    Family(
        "gemma3",
        "Gemma-3-4B (text)",
        _GEMMA3_4B_TEXT,
        models.build_tiny_gemma3,
        min_layers=2,
        cut=_last_global("sliding_attention", "full_attention"),
    ),
    Family("phi3", "Phi-3-mini-4k", _PHI3_MINI, models.build_tiny_phi3),
    Family("gpt2", "GPT-2", _GPT2, models.build_tiny_gpt2, cut=lambda n: {"n_layer": n}),
    Family("opt", "OPT-1.3B", _OPT_1_3B, models.build_tiny_opt),
    Family("gpt_neox", "Pythia-1.4B", _PYTHIA_1_4B, models.build_tiny_gpt_neox),
    Family("falcon", "Falcon-7B", _FALCON_7B, models.build_tiny_falcon),
    Family("qwen3_moe", "Qwen3-30B-A3B", QWEN3_MOE, models.build_tiny_qwen3_moe),
    Family("mixtral", "Mixtral-8x7B", _MIXTRAL_8X7B, models.build_tiny_mixtral),
    Family(
        "deepseek_v2",
        "DeepSeek-V2-Lite",
        _DEEPSEEK_V2_LITE,
        models.build_tiny_deepseek_v2,
        min_layers=2,
        cut=_first_dense,
    ),
    Family(
        "deepseek_v3",
        "DeepSeek-V3",
        _DEEPSEEK_V3,
        models.build_tiny_deepseek_v3,
        min_layers=2,
        cut=_first_dense,
    ),
    Family(
        "gpt_oss",
        "GPT-OSS-20B (bf16 experts)",
        _GPT_OSS_20B,
        models.build_tiny_gpt_oss,
        min_layers=2,
        cut=_alternating("sliding_attention", "full_attention"),
    ),
    Family(
        "qwen3_next",
        "Qwen3-Next-80B-A3B",
        _QWEN3_NEXT_80B,
        models.build_tiny_qwen3_next,
        tiny_dtype="bfloat16",
        min_layers=2,
        cut=_last_global("linear_attention", "full_attention", "full_attention_interval"),
    ),
    Family("mamba2", "Mamba2-2.7B", _MAMBA2_2_7B, models.build_tiny_mamba2),
    Family("falcon_h1", "Falcon-H1-7B", _FALCON_H1_7B, models.build_tiny_falcon_h1),
    Family(
        "nemotron_h",
        "Nemotron-H-8B",
        _NEMOTRON_H_8B,
        models.build_tiny_nemotron_h,
        min_layers=3,
        cut=_nemotron_pattern,
    ),
    Family("bert", "BERT-base", _BERT_BASE, models.build_tiny_bert, embedding=True),
    Family(
        "qwen3_embedding",
        "Qwen3-Embedding-0.6B",
        _QWEN3_EMBEDDING_0_6B,
        models.build_tiny_qwen3,
        embedding=True,
    ),
)

#: groups of families whose runs fit one GPU command of ten minutes together
GROUPS: dict[str, tuple[str, ...]] = {
    "dense": ("llama", "qwen2", "qwen3", "mistral", "gemma2", "gemma3", "phi3"),
    "classic": ("gpt2", "opt", "gpt_neox", "falcon", "bert", "qwen3_embedding"),
    "moe": ("qwen3_moe", "mixtral", "gpt_oss"),
    # multi-head latent attention; DeepSeek-V3's one MoE layer alone holds 22 GB of experts
    "mla": ("deepseek_v2", "deepseek_v3"),
    "hybrid": ("qwen3_next", "mamba2", "falcon_h1", "nemotron_h"),
}

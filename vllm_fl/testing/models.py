"""The models the plugin is checked on: tiny ones built locally, full-size ones as configs.

Tiny models (nothing is downloaded): `build_tiny_llama(path)` writes a Hugging Face model directory
that vLLM loads with `vllm.LLM(model=path)` (hidden 64, 2 layers, 2 heads of head_dim 32,
vocabulary 384, a byte-level BPE tokenizer trained locally); `build_tiny_quantized_llama` the same
as a checkpoint of any format of `vllm_fl.testing.formats` (quantised from the float one by its
`quantize_checkpoint`), and by name: `build_tiny_int8_llama` as an INT8 W8A8 checkpoint,
`build_tiny_gptq_llama` as a GPTQ (W4A16 or W8A16) one, `build_tiny_awq_llama` as an AWQ (W4A16
with zero points) one, `build_tiny_fp8_block_llama` as a block-quantized FP8 one (or its
dequantised twin); `build_tiny_qwen3_moe` a sparse MoE of the same size; `build_tiny_deepseek_v3`
a DeepSeek-V3 of that hidden size (multi-head latent attention, grouped MoE routing);
`build_tiny_gpt_oss`, `build_tiny_mamba2`, `build_tiny_qwen3_next`, `build_tiny_falcon_h1` and
`build_tiny_nemotron_h` one model of each of those families, as do `build_tiny_opt`,
`build_tiny_gpt_neox`, `build_tiny_falcon` (Falcon-7B's structure), `build_tiny_mixtral`,
`build_tiny_gemma2`, `build_tiny_gemma3` (text-only), `build_tiny_phi3`, `build_tiny_qwen2`,
`build_tiny_qwen3`, `build_tiny_mistral`, `build_tiny_deepseek_v2` and `build_tiny_bert` (an
encoder, for vLLM's pooling runner). Their weights come from a fixed seed and are scaled
up so the logits are far from ties, which makes greedy decoding a sharp comparison between two
runs.

Full-size models: `MODELS` holds the Hugging Face config of each model shape the benchmarks run
(vLLM creates dummy weights from it, `write_dummy_checkpoint`), `QUANTIZATIONS` the
``quantization_config`` of each checkpoint format (defined in `vllm_fl.testing.formats`), and
`ModelShape` reads from a config the sizes that kernel inputs are made of.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

# the checkpoint formats live with their quantiser (QUANTIZATIONS and dequantise_fp8_blocks are
# re-exported here, beside the models, where the benchmarks and tests take them)
from vllm_fl.testing.formats import (  # noqa: F401
    QUANTIZATIONS,
    dequantise_fp8_blocks,
    quantize_checkpoint,
)

VOCAB_SIZE = 384
HIDDEN_SIZE = 64
NUM_LAYERS = 2
NUM_HEADS = 2
NUM_KV_HEADS = 1
INTERMEDIATE_SIZE = 128
MAX_POSITIONS = 256
SEED = 1234

_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "vLLM serves large language models with paged attention.",
    "Operators dispatch between FlagGems, vendor kernels and a PyTorch reference.",
    "RMSNorm, SiluAndMul and RotaryEmbedding are replaced out of tree.",
    "A tiny random Llama is enough to prove that the plugin runs end to end.",
    "Hello world! 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ",
]

PROMPTS = [
    "The quick brown fox",
    "Operators dispatch between",
    "Hello world!",
    "A tiny random Llama",
]


def _train_tokenizer(path: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - 2,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 20, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(str(path))


def _dense_layers(**extra) -> dict:
    """What the tiny dense decoders share (Llama's layout): 2 layers of 2 query heads of head_dim
    32 sharing 1 key/value head, RMSNorm, RoPE, a SiLU-gated MLP."""
    layers = dict(
        num_hidden_layers=NUM_LAYERS,
        num_attention_heads=NUM_HEADS,
        num_key_value_heads=NUM_KV_HEADS,
        head_dim=HIDDEN_SIZE // NUM_HEADS,
        intermediate_size=INTERMEDIATE_SIZE,
    )
    return {**layers, **extra}


def build_tiny_llama(
    path: str | Path, hidden_size: int = HIDDEN_SIZE, rope_scaling: dict | None = None
) -> Path:
    """Write the tiny model and its tokenizer to `path` (created if missing); return it. Its
    head_dim is `hidden_size` / 2 (GPU attention kernels are safest with 64). `rope_scaling`
    (Hugging Face's, e.g. ``{"rope_type": "llama3", "factor": 8.0, ...}``) gives it a RoPE
    scaling, which vLLM builds as a subclass of its RotaryEmbedding."""
    from transformers import LlamaConfig, LlamaForCausalLM

    extra = {} if rope_scaling is None else {"rope_scaling": rope_scaling}

    return build_tiny_model(
        path,
        LlamaConfig,
        LlamaForCausalLM,
        **_dense_layers(hidden_size=hidden_size, head_dim=hidden_size // NUM_HEADS, **extra),
    )


def build_tiny_model(path: str | Path, config_cls, model_cls, **config) -> Path:
    """A random model of `model_cls` (its config from `config` and the shared defaults: vocabulary,
    hidden size, positions, the tokenizer's special tokens), saved with the tokenizer to `path`.
    The weights come from a fixed seed, scaled up so that greedy decoding has no near-ties."""
    import torch

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    _train_tokenizer(path)
    vocab = json.loads((path / "tokenizer.json").read_text())["model"]["vocab"]
    defaults = dict(
        vocab_size=VOCAB_SIZE,
        hidden_size=HIDDEN_SIZE,
        max_position_embeddings=MAX_POSITIONS,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        bos_token_id=vocab["<s>"],
        eos_token_id=vocab["</s>"],
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    torch.manual_seed(SEED)
    model = model_cls(config_cls(**{**defaults, **config}))
    with torch.no_grad():
        for name, param in model.named_parameters():
            # a norm's scale near 1; its bias (LayerNorm's) like any other: a bias near 1
            # on every channel adds one direction to each hidden state, whose most aligned
            # token then wins every greedy step
            if "norm" in name.lower() and not name.endswith(".bias"):
                param.copy_(1.0 + 0.1 * torch.randn_like(param))
            else:
                param.normal_(0.0, 0.2)
    model.save_pretrained(str(path), safe_serialization=True)
    return path


def build_tiny_quantized_llama(
    path: str | Path,
    fmt: str,
    hidden_size: int = 256,
    group_size: int | None = None,
    dequantised: bool = False,
) -> Path:
    """The tiny Llama (hidden `hidden_size`) as a checkpoint of format `fmt` in `path` (which
    must not exist or be empty): built unquantized next to it, then every projection quantised
    by `vllm_fl.testing.formats.quantize_checkpoint` (its `group_size` and `dequantised`)."""
    return _quantized(
        path,
        lambda folder: build_tiny_llama(folder, hidden_size=hidden_size),
        fmt,
        group_size=group_size,
        dequantised=dequantised,
    )


def _quantized(path: str | Path, build: Callable[[Path], Path], fmt: str, **options) -> Path:
    """The model `build` writes, quantised to format `fmt` into `path` (`options` go to
    quantize_checkpoint); the unquantized model lives in a scratch folder next to `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=f".{path.name}-float-") as scratch:
        return quantize_checkpoint(build(Path(scratch)), path, fmt, **options)


def build_tiny_int8_llama(path: str | Path, hidden_size: int = 256) -> Path:
    """The tiny Llama as an INT8 W8A8 checkpoint (compressed-tensors, the layout of
    ``QUANTIZATIONS["int8-w8a8"]``): every projection's weights quantised symmetrically per
    output channel (``weight`` int8, ``weight_scale`` [N, 1])."""
    return build_tiny_quantized_llama(path, "int8-w8a8", hidden_size)


def build_tiny_gptq_llama(
    path: str | Path, hidden_size: int = 256, quant: str = "w4a16-gptq"
) -> Path:
    """The tiny Llama as a GPTQ checkpoint of format `quant` (``QUANTIZATIONS["w4a16-gptq"]``
    or ``["w8a16-gptq"]``: symmetric, groups of 128, no act-order): every projection's weight
    [N, K] quantised per group of input channels and saved as GPTQ does: ``qweight`` [K / p, N]
    int32 packed along K, ``scales`` [K / G, N] float16, ``qzeros`` [K / G, N / p] holding zero
    point - 1 (GPTQ's format v1), ``g_idx`` [K]."""
    return build_tiny_quantized_llama(path, quant, hidden_size)


def build_tiny_awq_llama(path: str | Path, hidden_size: int = 256) -> Path:
    """The tiny Llama as an AWQ checkpoint (``QUANTIZATIONS["w4a16-awq"]``: 4 bits, groups of
    128, zero points): every projection's weight [N, K] quantised per group of input channels
    with zero points and saved as AutoAWQ's GEMM format does: ``qweight`` [K, N / 8] and
    ``qzeros`` [K / G, N / 8] int32 packed along N in AWQ's order (``formats.AWQ_PACK_ORDER``),
    ``scales`` [K / G, N] float16."""
    return build_tiny_quantized_llama(path, "w4a16-awq", hidden_size)


FP8_BLOCK = (128, 128)


def build_tiny_fp8_block_llama(
    path: str | Path, hidden_size: int = 256, dequantised: bool = False
) -> Path:
    """The tiny Llama as a block-quantized FP8 checkpoint (the layout of Qwen3-FP8 and
    DeepSeek-V3, ``QUANTIZATIONS["fp8-block"]``): every projection's weight quantised per 128 x 128
    block (``weight`` float8_e4m3fn, ``weight_scale_inv`` [N / 128, K / 128]). With
    ``dequantised``, the unquantized checkpoint of the weights the FP8 one stands for (float32
    weights equal to the dequantised blocks, no quantization config): what the FP8 model computes
    up to the activations' quantisation."""
    return build_tiny_quantized_llama(path, "fp8-block", hidden_size, dequantised=dequantised)


TINY_MOE_LAYERS = 2
TINY_MOE_EXPERTS = 8
TINY_MOE_TOP_K = 2
TINY_MOE_INTERMEDIATE_SIZE = 32
#: the tiny Qwen3-MoE's experts, routing and attention heads, whatever its widths
TINY_QWEN3_MOE = {
    "num_experts": TINY_MOE_EXPERTS,
    "num_experts_per_tok": TINY_MOE_TOP_K,
    "norm_topk_prob": True,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "num_hidden_layers": TINY_MOE_LAYERS,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
}


def build_tiny_qwen3_moe(path: str | Path) -> Path:
    """A tiny random Qwen3-MoE and its tokenizer in `path` (created if missing): hidden 64,
    2 layers, each a sparse MoE block of 8 experts with 2 active (moe_intermediate_size 32,
    routing weights renormalised), 2 heads of head_dim 32."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    return build_tiny_model(
        path,
        Qwen3MoeConfig,
        Qwen3MoeForCausalLM,
        intermediate_size=2 * HIDDEN_SIZE,
        moe_intermediate_size=TINY_MOE_INTERMEDIATE_SIZE,
        head_dim=32,
        **TINY_QWEN3_MOE,
    )


def build_tiny_gpt_oss(path: str | Path) -> Path:
    """A tiny random GPT-OSS and its tokenizer in `path` (created if missing): hidden 64,
    2 layers (sliding, then full attention, each with its sinks), a MoE of 4 experts with 2 active
    whose experts have biases and the ``swigluoai`` activation (interleaved gate/up, alpha 1.702,
    limit 7.0), 2 heads of head_dim 32."""
    from transformers import GptOssConfig, GptOssForCausalLM

    return build_tiny_model(
        path,
        GptOssConfig,
        GptOssForCausalLM,
        num_hidden_layers=NUM_LAYERS,
        num_local_experts=4,
        num_experts_per_tok=2,
        intermediate_size=TINY_MOE_INTERMEDIATE_SIZE,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        sliding_window=16,
        layer_types=["sliding_attention", "full_attention"],
        # vLLM's GPT-OSS reads YaRN's parameters (its checkpoints ship them); factor 1 is plain RoPE
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 1.0,
            "original_max_position_embeddings": MAX_POSITIONS,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
        },
    )


def build_tiny_mamba2(path: str | Path) -> Path:
    """A tiny random Mamba2 (no attention) and its tokenizer in `path` (created if missing):
    hidden 64, 2 layers, 4 heads of head_dim 32 (expand 2), 1 group, state 16, conv kernel 4."""
    from transformers import Mamba2Config, Mamba2ForCausalLM

    return build_tiny_model(
        path,
        Mamba2Config,
        Mamba2ForCausalLM,
        num_hidden_layers=NUM_LAYERS,
        num_heads=4,
        head_dim=32,
        expand=2,
        n_groups=1,
        state_size=16,
        conv_kernel=4,
        chunk_size=16,
        layer_norm_epsilon=1e-6,
    )


def build_tiny_gpt2(path: str | Path) -> Path:
    """A tiny random GPT-2 and its tokenizer in `path` (created if missing): hidden 64, 2 layers
    of 2 heads of head_dim 32, learned positions, biased LayerNorms, an MLP with the exact GELU
    (``activation_function: gelu``, vLLM's ``GELU``; GPT-2's own ``gelu_new`` is ``NewGELU``)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    return build_tiny_model(
        path,
        GPT2Config,
        GPT2LMHeadModel,
        n_layer=NUM_LAYERS,
        n_head=NUM_HEADS,
        n_inner=INTERMEDIATE_SIZE,
        activation_function="gelu",
        layer_norm_epsilon=1e-5,
    )


def build_tiny_qwen3_next(path: str | Path) -> Path:
    """A tiny random Qwen3-Next and its tokenizer in `path` (created if missing): hidden 64,
    2 layers (a gated-delta-net linear attention, then a gated full attention of 2 heads of
    head_dim 32, a quarter of it rotated), each followed by a MoE of 4 experts with 2 active
    (moe_intermediate_size 32) and a gated shared expert; the linear attention has 2 key heads
    and 4 value heads of dim 128 (the one head size vLLM's CPU kernel takes, as the real model's),
    conv kernel 4. vLLM's CPU gated-delta-net kernels take bfloat16 only: run it in bfloat16."""
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    return build_tiny_model(
        path,
        Qwen3NextConfig,
        Qwen3NextForCausalLM,
        num_hidden_layers=NUM_LAYERS,
        layer_types=["linear_attention", "full_attention"],
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        partial_rotary_factor=0.25,
        intermediate_size=2 * HIDDEN_SIZE,
        linear_conv_kernel_dim=4,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=TINY_MOE_INTERMEDIATE_SIZE,
        shared_expert_intermediate_size=TINY_MOE_INTERMEDIATE_SIZE,
        decoder_sparse_step=1,
        norm_topk_prob=True,
    )


def build_tiny_falcon_h1(path: str | Path) -> Path:
    """A tiny random Falcon-H1 and its tokenizer in `path` (created if missing): hidden 64,
    2 layers, each an attention of 2 heads of head_dim 32 beside a Mamba2 mixer (4 heads of
    head_dim 32, 1 group, state 16, conv kernel 4, gated RMSNorm) and an MLP; every muP
    multiplier is set away from 1 so that a layer that drops one changes the tokens."""
    from transformers import FalconH1Config, FalconH1ForCausalLM

    return build_tiny_model(
        path,
        FalconH1Config,
        FalconH1ForCausalLM,
        num_hidden_layers=NUM_LAYERS,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        intermediate_size=2 * HIDDEN_SIZE,
        mamba_d_ssm=2 * HIDDEN_SIZE,
        mamba_n_heads=4,
        mamba_d_head=32,
        mamba_n_groups=1,
        mamba_d_state=16,
        mamba_d_conv=4,
        mamba_expand=2,
        mamba_chunk_size=16,
        mamba_rms_norm=True,
        embedding_multiplier=1.5,
        lm_head_multiplier=0.75,
        mlp_multipliers=[1.25, 0.8],
        key_multiplier=0.9,
        attention_in_multiplier=1.1,
        attention_out_multiplier=0.7,
        ssm_in_multiplier=1.2,
        ssm_out_multiplier=0.6,
        ssm_multipliers=[1.1, 0.9, 1.2, 0.8, 1.3],
    )


def build_tiny_nemotron_h(path: str | Path) -> Path:
    """A tiny random Nemotron-H and its tokenizer in `path` (created if missing): hidden 64,
    3 layers (``M-*``: a Mamba2 mixer of 4 heads of head_dim 32, 1 group, state 16, conv
    kernel 4; an MLP with the squared-ReLU activation; an attention of 2 heads of head_dim 32
    without rotary embedding)."""
    from transformers import NemotronHConfig, NemotronHForCausalLM

    return build_tiny_model(
        path,
        NemotronHConfig,
        NemotronHForCausalLM,
        hybrid_override_pattern="M-*",
        num_hidden_layers=3,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        intermediate_size=2 * HIDDEN_SIZE,
        mlp_hidden_act="relu2",
        mamba_num_heads=4,
        mamba_head_dim=32,
        n_groups=1,
        ssm_state_size=16,
        conv_kernel=4,
        expand=2,
        chunk_size=16,
        layer_norm_epsilon=1e-6,
    )


def build_tiny_opt(path: str | Path) -> Path:
    """A tiny random OPT and its tokenizer in `path` (created if missing): hidden 64, 2 layers
    of 2 heads of head_dim 32, learned positions (OPT's offset of 2), biased LayerNorms before
    attention and MLP (OPT-125m's ``do_layer_norm_before``), a ReLU MLP, tied embeddings."""
    from transformers import OPTConfig, OPTForCausalLM

    return build_tiny_model(
        path,
        OPTConfig,
        OPTForCausalLM,
        num_hidden_layers=NUM_LAYERS,
        num_attention_heads=NUM_HEADS,
        ffn_dim=INTERMEDIATE_SIZE,
        word_embed_proj_dim=HIDDEN_SIZE,
        do_layer_norm_before=True,
        activation_function="relu",
        enable_bias=True,
        tie_word_embeddings=True,
    )


def build_tiny_gpt_neox(path: str | Path) -> Path:
    """A tiny random GPT-NeoX and its tokenizer in `path` (created if missing): hidden 64,
    2 layers of 2 heads of head_dim 32 with a fused, biased QKV, a quarter of each head rotated
    (Pythia's ``rotary_pct`` 0.25, NeoX-style halves), attention and MLP in parallel
    (``use_parallel_residual``), biased LayerNorms, an exact-GELU MLP, untied embeddings.
    vLLM 0.32 runs it through its Transformers backend."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    return build_tiny_model(
        path,
        GPTNeoXConfig,
        GPTNeoXForCausalLM,
        num_hidden_layers=NUM_LAYERS,
        num_attention_heads=NUM_HEADS,
        intermediate_size=INTERMEDIATE_SIZE,
        hidden_act="gelu",
        layer_norm_eps=1e-5,
        use_parallel_residual=True,
        attention_bias=True,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.25,
        },
    )


def build_tiny_falcon(path: str | Path) -> Path:
    """A tiny random Falcon of Falcon-7B's structure and its tokenizer in `path` (created if
    missing): hidden 64, 2 layers, each one LayerNorm feeding attention and MLP in parallel
    (``parallel_attn``, the old decoder architecture), multi-query attention (2 query heads of
    head_dim 32 sharing one key/value head), rotary positions (no ALiBi), no biases, an
    exact-GELU MLP, tied embeddings."""
    from transformers import FalconConfig, FalconForCausalLM

    return build_tiny_model(
        path,
        FalconConfig,
        FalconForCausalLM,
        num_hidden_layers=NUM_LAYERS,
        num_attention_heads=NUM_HEADS,
        new_decoder_architecture=False,
        multi_query=True,
        parallel_attn=True,
        alibi=False,
        bias=False,
        # vLLM's Falcon builds its MLP 4 x hidden wide whatever ffn_hidden_size says (as
        # Falcon-7B is): transformers' default, which the checkpoint must match
        activation="gelu",
        layer_norm_epsilon=1e-5,
        tie_word_embeddings=True,
    )


def build_tiny_mixtral(path: str | Path) -> Path:
    """A tiny random Mixtral and its tokenizer in `path` (created if missing): hidden 64,
    2 layers of 2 query heads of head_dim 32 sharing 1 key/value head, RMSNorm, RoPE, each MLP
    a sparse MoE of 4 SwiGLU experts with 2 active (moe width 32; Mixtral renormalises the top
    two's softmax weights), untied embeddings."""
    from transformers import MixtralConfig, MixtralForCausalLM

    return build_tiny_model(
        path,
        MixtralConfig,
        MixtralForCausalLM,
        num_hidden_layers=NUM_LAYERS,
        num_attention_heads=NUM_HEADS,
        num_key_value_heads=NUM_KV_HEADS,
        head_dim=HIDDEN_SIZE // NUM_HEADS,
        intermediate_size=TINY_MOE_INTERMEDIATE_SIZE,
        num_local_experts=4,
        num_experts_per_tok=2,
        sliding_window=None,
    )


#: the Gemmas' sliding window: shorter than a prompt and its generated tokens, so that a run
#: which ignores it attends to other tokens
TINY_SLIDING_WINDOW = 4


#: what the tiny Gemma2 and Gemma3 share: a sliding-window layer then a global one, 2 query heads
#: of head_dim 32 sharing 1 key/value head, queries scaled by head_dim, a tanh-GELU gated MLP
_TINY_GEMMA_LAYERS = dict(
    num_hidden_layers=NUM_LAYERS,
    num_attention_heads=NUM_HEADS,
    num_key_value_heads=NUM_KV_HEADS,
    head_dim=HIDDEN_SIZE // NUM_HEADS,
    query_pre_attn_scalar=HIDDEN_SIZE // NUM_HEADS,
    intermediate_size=INTERMEDIATE_SIZE,
    hidden_activation="gelu_pytorch_tanh",
    sliding_window=TINY_SLIDING_WINDOW,
    layer_types=["sliding_attention", "full_attention"],
)


def build_tiny_gemma2(path: str | Path) -> Path:
    """A tiny random Gemma2 and its tokenizer in `path` (created if missing): hidden 64,
    2 layers (sliding window of `TINY_SLIDING_WINDOW`, then global attention) of 2 query heads
    of head_dim 32 sharing 1 key/value head, GemmaRMSNorm (``1 + weight``) before and after
    attention and MLP, a tanh-GELU gated MLP, attention logits soft-capped, final logits
    soft-capped at 30, the embedding scaled by sqrt(hidden), tied embeddings. The attention's
    cap is 2 (Gemma2's is 50) so that it bends the tiny model's scores: a run that drops it
    gives other tokens (the final cap keeps the order of the logits, greedy tokens don't see
    it)."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    return build_tiny_model(
        path,
        Gemma2Config,
        Gemma2ForCausalLM,
        **_TINY_GEMMA_LAYERS,
        attn_logit_softcapping=2.0,
        final_logit_softcapping=30.0,
        tie_word_embeddings=True,
    )


def build_tiny_gemma3(path: str | Path) -> Path:
    """A tiny random text-only Gemma3 (``Gemma3ForCausalLM``) and its tokenizer in `path`
    (created if missing): hidden 64, 2 layers (sliding window of `TINY_SLIDING_WINDOW` with
    local RoPE of base 10 000, then global attention with RoPE of base 1 000 000 scaled
    linearly by 8, as Gemma3 4B and larger) of 2 query heads of head_dim 32 sharing 1
    key/value head, GemmaRMSNorm around attention and MLP and on each head's query and key, a
    tanh-GELU gated MLP, the embedding scaled by sqrt(hidden), tied embeddings."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    return build_tiny_model(
        path,
        Gemma3TextConfig,
        Gemma3ForCausalLM,
        **_TINY_GEMMA_LAYERS,
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "linear", "rope_theta": 1000000.0, "factor": 8.0},
        },
        tie_word_embeddings=True,
    )


def build_tiny_phi3(path: str | Path) -> Path:
    """A tiny random Phi-3 (Phi-3-mini-4k's structure) and its tokenizer in `path` (created if
    missing): hidden 64, 2 layers of 2 query heads of head_dim 32 sharing 1 key/value head, the
    query, key and value in one fused projection and gate and up in another (Phi-3's checkpoint
    layout), RMSNorm, plain RoPE, a SiLU-gated MLP, untied embeddings."""
    from transformers import Phi3Config, Phi3ForCausalLM

    return build_tiny_model(
        path,
        Phi3Config,
        Phi3ForCausalLM,
        num_hidden_layers=NUM_LAYERS,
        num_attention_heads=NUM_HEADS,
        num_key_value_heads=NUM_KV_HEADS,
        intermediate_size=INTERMEDIATE_SIZE,
        hidden_act="silu",
        original_max_position_embeddings=MAX_POSITIONS,
        pad_token_id=None,  # Phi-3's default (32000) lies outside the tiny vocabulary
    )


def build_tiny_bert(path: str | Path) -> Path:
    """A tiny random BERT encoder (``BertModel``, an embedding model) and its tokenizer in
    `path` (created if missing): hidden 64, 2 layers of 2 heads of head_dim 32, bidirectional
    attention, learned absolute positions and token types, post-attention and post-MLP biased
    LayerNorms, an exact-GELU MLP."""
    from transformers import BertConfig, BertModel

    return build_tiny_model(
        path,
        BertConfig,
        BertModel,
        num_hidden_layers=NUM_LAYERS,
        num_attention_heads=NUM_HEADS,
        intermediate_size=INTERMEDIATE_SIZE,
        hidden_act="gelu",
        type_vocab_size=2,
        layer_norm_eps=1e-12,
    )


def build_tiny_qwen2(path: str | Path) -> Path:
    """A tiny random Qwen2 and its tokenizer in `path` (created if missing): Llama's layout with
    biases on the query, key and value projections (Qwen2's), untied embeddings."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    return build_tiny_model(path, Qwen2Config, Qwen2ForCausalLM, **_dense_layers())


def build_tiny_qwen3(path: str | Path) -> Path:
    """A tiny random dense Qwen3 and its tokenizer in `path` (created if missing): Llama's
    layout with an RMSNorm on each head's query and key before RoPE (Qwen3's), no projection
    biases. Also the checkpoint of the Qwen3 embedding test (vLLM's pooling runner)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    return build_tiny_model(path, Qwen3Config, Qwen3ForCausalLM, **_dense_layers())


def build_tiny_mistral(path: str | Path) -> Path:
    """A tiny random Mistral and its tokenizer in `path` (created if missing): Llama's layout
    under Mistral's architecture name and config (vLLM builds it with its Llama code), no
    sliding window (Mistral-7B-v0.2 and later)."""
    from transformers import MistralConfig, MistralForCausalLM

    return build_tiny_model(
        path, MistralConfig, MistralForCausalLM, **_dense_layers(sliding_window=None)
    )


TINY_MLA_HEADS = 4
TINY_MLA_Q_LORA_RANK = 64
# vLLM's CPU MLA decode kernel is built for DeepSeek's latent entry only (512 + 64), so vanilla
# vLLM on the CPU runs the tiny model only with these two sizes
TINY_MLA_KV_LORA_RANK = 512
TINY_MLA_ROPE_DIM = 64
TINY_MLA_NOPE_DIM = 32
TINY_MLA_V_DIM = 32
TINY_MLA_EXPERTS = 8
TINY_MLA_GROUPS = 4


def _tiny_deepseek(heads: int, qk_nope_head_dim: int, v_head_dim: int) -> dict:
    """What the tiny DeepSeek-V2 and V3 share: hidden 64, 2 layers (the first dense, the second
    a MoE of 8 routed experts in 4 groups, 2 groups then 2 experts chosen, one shared expert),
    multi-head latent attention with q_lora_rank 64, kv_lora_rank 512 and qk_rope_head_dim 64."""
    return dict(
        intermediate_size=2 * HIDDEN_SIZE,
        moe_intermediate_size=TINY_MOE_INTERMEDIATE_SIZE,
        num_hidden_layers=2,
        first_k_dense_replace=1,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        q_lora_rank=TINY_MLA_Q_LORA_RANK,
        kv_lora_rank=TINY_MLA_KV_LORA_RANK,
        qk_nope_head_dim=qk_nope_head_dim,
        qk_rope_head_dim=TINY_MLA_ROPE_DIM,
        v_head_dim=v_head_dim,
        head_dim=TINY_MLA_ROPE_DIM,
        n_routed_experts=TINY_MLA_EXPERTS,
        n_shared_experts=1,
        num_experts_per_tok=2,
        n_group=TINY_MLA_GROUPS,
        topk_group=2,
    )


def build_tiny_deepseek_v3(
    path: str | Path,
    heads: int = TINY_MLA_HEADS,
    qk_nope_head_dim: int = TINY_MLA_NOPE_DIM,
    v_head_dim: int = TINY_MLA_V_DIM,
) -> Path:
    """A tiny random DeepSeek-V3 (``DeepseekV3ForCausalLM``) and its tokenizer in `path`
    (created if missing): hidden 64, 2 layers, the first dense and the second a MoE of 8 routed
    experts in 4 groups (``noaux_tc``: sigmoid scores plus a correction bias choose 2 groups, then
    2 experts) with one shared expert; multi-head latent attention with `heads` heads (4),
    q_lora_rank 64, kv_lora_rank 512, `qk_nope_head_dim` (32), qk_rope_head_dim 64 and
    `v_head_dim` (32). GPU runs take DeepSeek's 16 heads of 128 + 64 and 128, the head sizes
    vLLM's FlashAttention MLA prefill is built for."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    path = build_tiny_model(
        path,
        DeepseekV3Config,
        DeepseekV3ForCausalLM,
        **_tiny_deepseek(heads, qk_nope_head_dim, v_head_dim),
        topk_method="noaux_tc",
        scoring_func="sigmoid",
        norm_topk_prob=True,
        routed_scaling_factor=2.5,
    )
    # the routing's correction bias is a buffer, which the random init leaves at zero: give it
    # values so that it takes part in the choice
    weights = load_file(str(path / "model.safetensors"))
    generator = torch.Generator().manual_seed(SEED)
    for name, tensor in weights.items():
        if name.endswith("e_score_correction_bias"):
            weights[name] = 0.5 * torch.randn(tensor.shape, generator=generator)
    save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


def build_tiny_deepseek_v2(path: str | Path) -> Path:
    """A tiny random DeepSeek-V2 (``DeepseekV2ForCausalLM``) and its tokenizer in `path`
    (created if missing): DeepSeek-V2's routing, unlike V3's, has no correction bias: softmax
    scores, the 2 of 4 expert groups with the highest single score (``group_limited_greedy``),
    then 2 of the 8 routed experts among them, beside one shared expert; the first layer dense;
    multi-head latent attention of the sizes `build_tiny_deepseek_v3` takes (vLLM's CPU MLA
    kernel is built for DeepSeek's latent entry only)."""
    from transformers import DeepseekV2Config, DeepseekV2ForCausalLM

    return build_tiny_model(
        path,
        DeepseekV2Config,
        DeepseekV2ForCausalLM,
        **_tiny_deepseek(TINY_MLA_HEADS, TINY_MLA_NOPE_DIM, TINY_MLA_V_DIM),
        topk_method="group_limited_greedy",
        norm_topk_prob=False,
        routed_scaling_factor=1.0,
    )


def build_tiny_fp8_qwen3_moe(path: str | Path, dequantised: bool = False) -> Path:
    """The tiny Qwen3-MoE with hidden and expert sizes of one FP8 block (128; 2 heads of head_dim
    64) and its experts as an FP8 block checkpoint (the layout of Qwen3-30B-A3B-FP8 and
    DeepSeek-V3, ``QUANTIZATIONS["fp8-block"]``): each expert projection float8_e4m3fn with
    ``weight_scale_inv`` per 128x128 block. The attention projections and the router stay
    unquantized (``ignored_layers``): this checkpoint is about the experts. With `dequantised`,
    the same model unquantized, every expert weight replaced by what its FP8 values stand for."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    def build(folder: Path) -> Path:
        return build_tiny_model(
            folder,
            Qwen3MoeConfig,
            Qwen3MoeForCausalLM,
            hidden_size=FP8_BLOCK[0],
            intermediate_size=2 * FP8_BLOCK[0],
            moe_intermediate_size=FP8_BLOCK[0],
            head_dim=64,  # which every GPU attention kernel supports
            **TINY_QWEN3_MOE,
        )

    path = _quantized(
        path,
        build,
        "fp8-block",
        select=lambda name: ".mlp.experts." in name,
        dequantised=dequantised,
    )
    if not dequantised:
        config = json.loads((path / "config.json").read_text())
        ignored = [
            f"model.layers.{layer}.{module}"
            for layer in range(TINY_MOE_LAYERS)
            for module in (
                "self_attn.q_proj",
                "self_attn.k_proj",
                "self_attn.v_proj",
                "self_attn.o_proj",
                "mlp.gate",
            )
        ]
        config["quantization_config"]["ignored_layers"] = ignored
        (path / "config.json").write_text(json.dumps(config, indent=2))
    return path


#: tiny model name -> its builder (a directory in, the model's directory out)
TINY_MODELS = {
    "tiny-llama": build_tiny_llama,
    "tiny-int8-llama": build_tiny_int8_llama,
    "tiny-gptq-llama": build_tiny_gptq_llama,
    "tiny-awq-llama": build_tiny_awq_llama,
    "tiny-fp8-block-llama": build_tiny_fp8_block_llama,
    "tiny-qwen3-moe": build_tiny_qwen3_moe,
    "tiny-deepseek-v3": build_tiny_deepseek_v3,
    "tiny-fp8-qwen3-moe": build_tiny_fp8_qwen3_moe,
}


# -- full-size model shapes -----------------------------------------------------------------------

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

# Qwen3-30B-A3B's shape (48 layers there; a benchmark's --layers keeps fewer, so that dummy
# weights start fast).
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

# DeepSeek-V3's structure at DeepSeek-V2-Lite's size, 2 layers: multi-head latent attention (16
# heads, q_lora_rank 1536, kv_lora_rank 512, qk_nope 128 / qk_rope 64 / v 128), the first layer
# dense, then MoE layers of 64 routed experts in 8 groups (noaux_tc: 4 groups, then 8 experts)
# and one shared expert.
DEEPSEEK_V3_2L = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 2048,
    "intermediate_size": 10944,
    "moe_intermediate_size": 1408,
    "num_hidden_layers": 2,
    "first_k_dense_replace": 1,
    "moe_layer_freq": 1,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "n_routed_experts": 64,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "n_group": 8,
    "topk_group": 4,
    "topk_method": "noaux_tc",
    "scoring_func": "sigmoid",
    "norm_topk_prob": True,
    "routed_scaling_factor": 2.5,
    "vocab_size": 102400,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
    "bos_token_id": 100000,
    "eos_token_id": 100001,
}

#: model name (the benchmarks' --shape) -> Hugging Face config
MODELS: dict[str, dict] = {
    "llama3-8b": LLAMA3_8B,
    "qwen3-moe": QWEN3_MOE,
    "deepseek-v3-2l": DEEPSEEK_V3_2L,
}


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
            experts=config.get("num_experts", config.get("n_routed_experts")),
            top_k=config.get("num_experts_per_tok"),
            moe_intermediate=config.get("moe_intermediate_size"),
        )

    @property
    def q_size(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.kv_heads * self.head_dim


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


def write_dummy_checkpoint(
    path: str | Path, name: str, layers: int | None = None, quant: str | None = None
) -> Path:
    """A model directory holding only the config.json of model `name` (vLLM makes up the weights
    with ``load_format="dummy"``), as a checkpoint of format `quant` if given."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(model_config(name, layers, quant), indent=1))
    return path

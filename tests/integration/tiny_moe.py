"""A tiny random Qwen3-MoE, built locally like the tiny Llama (same tokenizer and prompts).

`build_tiny_qwen3_moe(path)` writes a Hugging Face model directory that vLLM loads with
`vllm.LLM(model=path)`: hidden 64, 2 layers, each a sparse MoE block of 8 experts with 2 active
(moe_intermediate_size 32, routing weights renormalised), 2 heads of head_dim 32.
"""

from __future__ import annotations

import json
from pathlib import Path

from tiny_model import MAX_POSITIONS, SEED, VOCAB_SIZE, _train_tokenizer

HIDDEN_SIZE = 64
NUM_LAYERS = 2
NUM_EXPERTS = 8
TOP_K = 2
MOE_INTERMEDIATE_SIZE = 32


def build_tiny_qwen3_moe(path: str | Path) -> Path:
    """Write the tiny MoE model and its tokenizer to `path` (created if missing); return it."""
    import torch
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    _train_tokenizer(path)
    vocab = json.loads((path / "tokenizer.json").read_text())["model"]["vocab"]
    config = Qwen3MoeConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=HIDDEN_SIZE,
        intermediate_size=2 * HIDDEN_SIZE,
        moe_intermediate_size=MOE_INTERMEDIATE_SIZE,
        num_experts=NUM_EXPERTS,
        num_experts_per_tok=TOP_K,
        norm_topk_prob=True,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        num_hidden_layers=NUM_LAYERS,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        max_position_embeddings=MAX_POSITIONS,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        bos_token_id=vocab["<s>"],
        eos_token_id=vocab["</s>"],
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    torch.manual_seed(SEED)
    model = Qwen3MoeForCausalLM(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.copy_(1.0 + 0.1 * torch.randn_like(param))
            else:
                param.normal_(0.0, 0.2)
    model.save_pretrained(str(path), safe_serialization=True)
    return path


if __name__ == "__main__":
    import sys

    print(build_tiny_qwen3_moe(sys.argv[1]))

"""A tiny random Qwen3-MoE, built locally like the tiny Llama (same tokenizer and prompts).

`build_tiny_qwen3_moe(path)` writes a Hugging Face model directory that vLLM loads with
`vllm.LLM(model=path)`: hidden 64, 2 layers, each a sparse MoE block of 8 experts with 2 active
(moe_intermediate_size 32, routing weights renormalised), 2 heads of head_dim 32.
"""

from __future__ import annotations

from pathlib import Path

from tiny_model import HIDDEN_SIZE, build_tiny_model

NUM_LAYERS = 2
NUM_EXPERTS = 8
TOP_K = 2
MOE_INTERMEDIATE_SIZE = 32


def build_tiny_qwen3_moe(path: str | Path) -> Path:
    """Write the tiny MoE model and its tokenizer to `path` (created if missing); return it."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    return build_tiny_model(
        path,
        Qwen3MoeConfig,
        Qwen3MoeForCausalLM,
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
    )


if __name__ == "__main__":
    import sys

    print(build_tiny_qwen3_moe(sys.argv[1]))

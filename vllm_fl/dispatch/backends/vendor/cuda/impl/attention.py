"""The attention backend the platform uses when the CUDA vendor backend is preferred."""

# vLLM's FlashAttention backends, vLLM's first choice on Hopper (vllm/platforms/cuda.py).
FLASH_ATTN = "vllm.v1.attention.backends.flash_attn.FlashAttentionBackend"
FLASH_ATTN_MLA = "vllm.v1.attention.backends.mla.flashattn_mla.FlashAttnMLABackend"


def attention_backend(use_mla: bool = False) -> str:
    """vLLM's FlashAttention backend (FlashAttention MLA for MLA models)."""
    return FLASH_ATTN_MLA if use_mla else FLASH_ATTN

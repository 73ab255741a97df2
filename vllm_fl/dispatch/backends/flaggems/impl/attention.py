"""The attention backend the platform uses when FlagGems is the preferred backend."""

# vLLM's Triton attention backends: portable Triton kernels, like FlagGems'.
# Same module path in vLLM 0.24 and 0.32 (vllm/v1/attention/backends/...).
TRITON_ATTN = "vllm.v1.attention.backends.triton_attn.TritonAttentionBackend"
TRITON_MLA = "vllm.v1.attention.backends.mla.triton_mla.TritonMLABackend"


def attention_backend(use_mla: bool = False) -> str:
    """vLLM's Triton attention backend (its Triton MLA backend for MLA models)."""
    return TRITON_MLA if use_mla else TRITON_ATTN

"""The attention backend the platform uses when the Ascend vendor backend is preferred."""

# vllm-ascend's v1 attention backends (vllm_ascend/platform.py's backend map).
ASCEND_ATTN = "vllm_ascend.attention.attention_v1.AscendAttentionBackend"
ASCEND_MLA = "vllm_ascend.attention.mla_v1.AscendMLABackend"


def attention_backend(use_mla: bool = False) -> str:
    """vllm-ascend's attention backend (its MLA backend for MLA models)."""
    return ASCEND_MLA if use_mla else ASCEND_ATTN

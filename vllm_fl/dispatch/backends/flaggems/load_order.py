"""Loads vLLM's compiled MoE library before ``flag_gems`` (the flagos backend requires this module
first, see ops.yaml).

``flag_gems`` defines ops under vLLM's library name ``_moe_C`` (``topk_softmax``,
``moe_align_block_size``, ...) with schemas of its own. Whichever loads first owns those names: if
``flag_gems`` came first, vLLM's compiled kernels fail to register (the C++ "Tried to register an
operator ... with the same name" error) and every call of ``torch.ops._moe_C.<op>`` - vLLM's own
wrappers and the cuda backend's - reaches FlagGems' op, with another signature. Loading vLLM's
library first keeps ``_moe_C`` vLLM's, so the dispatch decides which kernel runs, not import
order. (FlagGems itself tries ``vllm._moe_C`` first, but vLLM 0.24 ships that library as
``vllm._moe_C_stable_libtorch``.) Without vLLM's CUDA build there is nothing to load.
"""

import importlib
import importlib.util


#: the names vLLM's compiled MoE library has had (newest first)
VLLM_MOE_LIBRARIES = ("vllm._moe_C_stable_libtorch", "vllm._moe_C")


def _load_vllm_moe_library() -> str | None:
    """Import vLLM's compiled MoE library if there is one; return its module name."""
    if importlib.util.find_spec("vllm") is None:
        return None
    for name in VLLM_MOE_LIBRARIES:
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        return name
    return None


VLLM_MOE_LIBRARY = _load_vllm_moe_library()

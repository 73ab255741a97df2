"""Loads vLLM's compiled MoE library before ``flag_gems`` (the flagos backend requires this module
first, see ops.yaml).

``flag_gems`` defines ops under vLLM's library name ``_moe_C`` (``topk_softmax``,
``moe_align_block_size``, ...) with schemas of its own. Whichever loads first owns those names: if
``flag_gems`` came first, vLLM's compiled kernels fail to register (the C++ "Tried to register an
operator ... with the same name" error) and every call of ``torch.ops._moe_C.<op>`` - vLLM's own
wrappers and the cuda backend's - reaches FlagGems' op, with another signature. Loading vLLM's
library first keeps ``_moe_C`` vLLM's, so the dispatch decides which kernel runs, not import
order. Without vLLM's CUDA build there is nothing to load.
"""

import importlib
import importlib.util


def _load_vllm_moe_library() -> bool:
    if importlib.util.find_spec("vllm") is None:
        return False
    try:
        importlib.import_module("vllm._moe_C")
    except ImportError:
        return False
    return True


VLLM_MOE_LIBRARY_LOADED = _load_vllm_moe_library()

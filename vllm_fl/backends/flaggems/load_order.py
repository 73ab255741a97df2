"""vLLM's compiled MoE library must be loaded before ``flag_gems`` (the backend's ``prepare``
hook, see the package's ``BACKEND``).

``flag_gems`` defines ops under vLLM's library name ``_moe_C`` (``topk_softmax``,
``moe_align_block_size``, ...) with schemas of its own. Whichever loads first owns those names: if
``flag_gems`` came first, vLLM's compiled kernels fail to register (the C++ "Tried to register an
operator ... with the same name" error) and every call of ``torch.ops._moe_C.<op>`` - vLLM's own
wrappers and the cuda backend's - reaches FlagGems' op, with another signature. Loading vLLM's
library first keeps ``_moe_C`` vLLM's, so the dispatch decides which kernel runs, not import
order. (FlagGems itself tries ``vllm._moe_C`` first, but recent vLLM ships that library as
``vllm._moe_C_stable_libtorch``.) Without vLLM's CUDA build there is nothing to load.
"""

import importlib
import importlib.util

__all__ = ["VLLM_MOE_LIBRARIES", "load_vllm_moe_library"]

#: the names vLLM's compiled MoE library has had (newest first)
VLLM_MOE_LIBRARIES = ("vllm._moe_C_stable_libtorch", "vllm._moe_C")


def load_vllm_moe_library() -> str | None:
    """Import vLLM's compiled MoE library if there is one and a CUDA device (without one the
    backend never imports ``flag_gems``); return its module name."""
    import torch

    if importlib.util.find_spec("vllm") is None or not torch.cuda.is_available():
        return None
    for name in VLLM_MOE_LIBRARIES:
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        return name
    return None

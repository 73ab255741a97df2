"""Each ``attention_backend`` impl names a class that exists.

vLLM's backends are checked in the installed vLLM (0.32) without importing them (the CUDA
ones pull in GPU-only modules): the module file must exist and define the class. vLLM 0.24
(what the GPU machine runs) has the same modules and classes. vllm-ascend is not installed;
its paths are the ones vllm-ascend's platform returns. The plugin's own backend is imported.
"""

import importlib
import importlib.util
import re
from pathlib import Path

import pytest

from vllm_fl.attention import PLUGIN_BACKEND
from vllm_fl.dispatch.backends.flaggems.impl import attention as flagos
from vllm_fl.dispatch.backends.reference.impl import attention as reference
from vllm_fl.dispatch.backends.vendor.cuda.impl import attention as cuda


def _defines(class_path: str) -> bool:
    module, name = class_path.rsplit(".", 1)
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return False
    return re.search(rf"^class {name}\b", Path(spec.origin).read_text(), re.M) is not None


@pytest.mark.parametrize(
    "impl, use_mla",
    [(flagos, True), (cuda, False), (cuda, True)],
    ids=["flagos-mla", "cuda", "cuda-mla"],
)
def test_vllm_attention_backend_class_exists(impl, use_mla):
    path = impl.attention_backend(use_mla)
    assert path.startswith("vllm.v1.attention.backends.")
    assert _defines(path), path


@pytest.mark.parametrize("impl", [flagos, reference], ids=["flagos", "reference"])
def test_the_plugins_backend_for_standard_attention(impl):
    assert impl.attention_backend(False) == PLUGIN_BACKEND
    module, name = PLUGIN_BACKEND.rsplit(".", 1)
    backend = getattr(importlib.import_module(module), name)
    assert backend.get_impl_cls().__module__ == module


def test_the_reference_leaves_mla_to_vllm():
    """The plugin has no MLA backend: an empty path keeps vLLM's choice."""
    assert reference.attention_backend(True) == ""

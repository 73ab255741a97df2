"""Each ``attention_backend`` impl names a class that exists.

vLLM's backends are checked in the installed vLLM (0.32) without importing them (the CUDA
ones pull in GPU-only modules): the module file must exist and define the class. vLLM 0.24
(what the GPU machine runs) has the same modules and classes. vllm-ascend is not installed;
its paths are the ones vllm-ascend's platform returns. The plugin's own backends are imported.
"""

import importlib
import importlib.util
import re
from pathlib import Path

import pytest

from vllm_fl.attention import PLUGIN_BACKEND
from vllm_fl.attention.mla import MLA_BACKEND
from vllm_fl.backends.flaggems.impl import attention as flagos
from vllm_fl.backends.reference.impl import attention as reference
from vllm_fl.backends.cuda.impl import attention as cuda


def _defines(class_path: str) -> bool:
    module, name = class_path.rsplit(".", 1)
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return False
    return re.search(rf"^class {name}\b", Path(spec.origin).read_text(), re.M) is not None


def test_vllm_attention_backend_class_exists():
    path = cuda.attention_backend(False)
    assert path.startswith("vllm.v1.attention.backends.")
    assert _defines(path), path


def test_the_vendor_leaves_mla_to_vllm():
    """An empty path keeps vLLM's choice: vanilla vLLM's MLA backend under the shipped policy."""
    assert cuda.attention_backend(True) == ""


@pytest.mark.parametrize("impl", [flagos, reference], ids=["flagos", "reference"])
def test_the_plugins_backend_for_standard_attention(impl):
    assert impl.attention_backend(False) == PLUGIN_BACKEND
    module, name = PLUGIN_BACKEND.rsplit(".", 1)
    backend = getattr(importlib.import_module(module), name)
    assert backend.get_impl_cls().__module__ == module


@pytest.mark.parametrize("impl", [flagos, reference], ids=["flagos", "reference"])
def test_the_plugins_mla_backend_for_mla(impl):
    assert impl.attention_backend(True) == MLA_BACKEND
    module, name = MLA_BACKEND.rsplit(".", 1)
    backend = getattr(importlib.import_module(module), name)
    assert backend.get_impl_cls().__module__ == module

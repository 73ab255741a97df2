"""Each ``attention_backend`` impl names a class that exists.

vLLM's backends are checked in the installed vLLM (0.32) without importing them (the CUDA
ones pull in GPU-only modules): the module file must exist and define the class. vLLM 0.24
(what the GPU machine runs) has the same modules and classes. vllm-ascend is not installed;
its paths are the ones vllm-ascend's platform returns.
"""

import importlib.util
import re
from pathlib import Path

import pytest

from vllm_fl.dispatch.backends.flaggems.impl import attention as flagos
from vllm_fl.dispatch.backends.vendor.cuda.impl import attention as cuda


def _defines(class_path: str) -> bool:
    module, name = class_path.rsplit(".", 1)
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return False
    return re.search(rf"^class {name}\b", Path(spec.origin).read_text(), re.M) is not None


@pytest.mark.parametrize("impl", [flagos, cuda], ids=["flagos", "cuda"])
@pytest.mark.parametrize("use_mla", [False, True])
def test_vllm_attention_backend_class_exists(impl, use_mla):
    path = impl.attention_backend(use_mla)
    assert path.startswith("vllm.v1.attention.backends.")
    assert _defines(path), path


def test_mla_and_non_mla_differ():
    assert flagos.attention_backend(False) != flagos.attention_backend(True)
    assert cuda.attention_backend(False) != cuda.attention_backend(True)

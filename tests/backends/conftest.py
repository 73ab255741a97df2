"""Shared helpers for the operator implementation tests.

vLLM layers are constructed inside ``set_current_vllm_config(VllmConfig())``, as vLLM
requires outside an engine.
"""

import os

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    """Every test draws the same random inputs on every run."""
    torch.manual_seed(int(os.environ.get("VLLM_FL_TEST_SEED", "0")))


@pytest.fixture
def vllm_config():
    """Enter vLLM's current config so its layers can be built; yields nothing.

    Also loads vLLM's compiled ops, as its platform does at start-up (some layers look
    theirs up in ``torch.ops._C`` when constructed).
    """
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.platforms import current_platform

    current_platform.import_kernels()
    with set_current_vllm_config(VllmConfig()):
        yield

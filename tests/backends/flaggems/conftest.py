"""Every flagos backend test draws the same random inputs on every run."""

import os

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(int(os.environ.get("VLLM_FL_TEST_SEED", "0")))

"""The flagos backend's tests share the operator tests' helpers (``tests/ops/ops_helpers.py``:
dtypes, the manifest's tolerances, vLLM's cos/sin cache) and draw the same random inputs on
every run."""

import os
import sys
from pathlib import Path

import pytest
import torch

_OPS_TESTS = str(Path(__file__).resolve().parents[2] / "ops")
if _OPS_TESTS not in sys.path:
    sys.path.insert(0, _OPS_TESTS)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(int(os.environ.get("VLLM_FL_TEST_SEED", "0")))

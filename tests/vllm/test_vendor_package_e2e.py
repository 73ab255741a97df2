"""An out-of-tree vendor package in a real vLLM run (its CPU build, the plugin's CPU platform):
scaffolded, two impls written, generated and installed (tests/support/vendor_package.py), its
impls are the ones the dispatch uses for those ops and the tokens equal the reference's; without
it the plugin runs as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.vendor_package import NAME, OPS, installed
from vllm_fl.testing.launch import PLUGIN_ON, run_vllm, vllm_available
from vllm_fl.testing.models import build_tiny_llama

pytestmark = pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


def test_the_vendor_package_serves_its_ops_in_vllm_with_the_reference_tokens(
    model, tmp_path_factory
):
    _, pythonpath = installed(tmp_path_factory.mktemp("vendor"))
    reference = run_vllm(model, PLUGIN_ON)
    vendor = run_vllm(model, {**PLUGIN_ON, "VLLM_FL_PREFER": "vendor", "PYTHONPATH": pythonpath})
    for op in OPS:
        assert vendor.result["used_impls"].get(op) == f"vendor.{NAME}", vendor.result["used_impls"]
        assert vendor.lines(f"Op '{op}' using 'vendor.{NAME}'"), f"no dispatch log for {op}"
        assert reference.result["used_impls"].get(op) == "reference.torch"
    assert vendor.result["used_impls"]["rotary_embedding"] == "reference.torch"
    assert vendor.result["tokens"] == reference.result["tokens"]
    # the same settings without the package installed: the plugin as it was
    alone = run_vllm(model, {**PLUGIN_ON, "VLLM_FL_PREFER": "vendor"})
    assert alone.result["used_impls"] == reference.result["used_impls"]
    assert alone.result["tokens"] == reference.result["tokens"]

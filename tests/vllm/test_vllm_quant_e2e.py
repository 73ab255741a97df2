"""Real vLLM (its CPU build) with the plugin on a quantized checkpoint: a tiny INT8 W8A8 Llama
(compressed-tensors, weights quantised from the tiny model's) generates the same greedy tokens on
the plugin's CPU platform, where the layers' GEMMs run through the dispatch, as on vLLM's own
CPU platform with its oneDNN kernel. The plugin's run uses vLLM's default process layout."""

from __future__ import annotations

import pytest
from vllm_fl.testing.models import build_tiny_int8_llama

from vllm_fl.testing.launch import PLUGIN_OFF, PLUGIN_ON, vllm_available

from tests.support.cpu_kernels import needs_avx512_kernels

pytestmark = pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")


@pytest.fixture(scope="module")
def int8_model(tmp_path_factory):
    return build_tiny_int8_llama(tmp_path_factory.mktemp("tiny-int8-llama"))


@needs_avx512_kernels(
    "vanilla's INT8 W8A8 GEMM there gives other greedy tokens than the plugin's (which match "
    "vanilla's where vLLM runs its AVX-512 kernels); the plugin's impls are plain PyTorch"
)
def test_int8_w8a8_generates_vanillas_tokens_through_the_dispatch(vllm_runs, int8_model):
    vanilla = vllm_runs("int8 w8a8, plugin off", PLUGIN_OFF, model=int8_model)
    plugin = vllm_runs(
        "int8 w8a8, plugin on, multi-process",
        {**PLUGIN_ON, "VLLM_ENABLE_V1_MULTIPROCESSING": "1"},
        model=int8_model,
        watch_engine=True,
    )
    assert plugin.result["platform"].endswith(".PlatformFLCpu")
    assert plugin.lines("vllm_fl: quantization 'compressed-tensors': the plugin dispatches INT8")
    assert plugin.lines("Op 'int8_scaled_mm' using 'reference.torch'")
    assert plugin.lines("Op 'scaled_int8_quant' using 'reference.torch'")
    tokens = plugin.result["tokens"]
    assert tokens == vanilla.result["tokens"]
    assert len(set(tokens[0])) > 4, tokens  # not a degenerate repetition

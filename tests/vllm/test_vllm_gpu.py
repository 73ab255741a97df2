"""Real vLLM on an NVIDIA GPU, with and without the plugin's CUDA platform (PlatformFL), on a tiny
Llama in bfloat16 (vLLM's FlashAttention refuses float32) with head_dim 64.

For eager and compile mode: greedy generation with VLLM_PLUGINS=none (vanilla vLLM) and with
VLLM_PLUGINS=fl (the plugin, its platform auto-detected through NVML) gives the same tokens; the
plugin's platform is active, vLLM built our classes for RMSNorm, SiluAndMul and RotaryEmbedding
and bound their forward_oot, and in eager mode the shipped CUDA policy ran vLLM's CUDA kernels
(`vendor.cuda`). Each run is one process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`), which finds this
checkout's plugin through PYTHONPATH whether or not it is installed (`checkout_plugin_env`).

Marked ``gpu``: skipped without an NVIDIA GPU or vLLM's CUDA build; `make test-gpu` runs it.
"""

from __future__ import annotations

import pytest

from vllm_fl.testing.models import build_tiny_llama
from tests.support.plugin_env import checkout_plugin_env
from vllm_fl.testing.launch import PLUGIN_NAME, REPLACED

pytestmark = pytest.mark.gpu("vllm")

DTYPE = "bfloat16"
#: FlashInfer is not needed for these runs (and not installed on every GPU machine)
BASE = {"VLLM_USE_FLASHINFER_SAMPLER": "0"}
MODES = ["eager", "compile"]


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory) -> dict[str, str]:
    return {**BASE, **checkout_plugin_env(tmp_path_factory.mktemp("plugin-dist"))}


@pytest.fixture(scope="module")
def gpu_model(tmp_path_factory):
    """The tiny Llama with head_dim 64, which every GPU attention kernel supports."""
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama-gpu"), hidden_size=128)


def _runs(vllm_runs, plugin_env, gpu_model, mode: str):
    common = dict(mode=mode, dtype=DTYPE, model=gpu_model)
    vanilla = vllm_runs(f"gpu {mode}, plugin off", {**BASE, "VLLM_PLUGINS": "none"}, **common)
    plugin_on = {**plugin_env, "VLLM_PLUGINS": PLUGIN_NAME}
    plugin = vllm_runs(f"gpu {mode}, plugin on", plugin_on, **common)
    return vanilla, plugin


@pytest.mark.parametrize("mode", MODES)
def test_plugin_on_gpu_generates_vanillas_tokens(vllm_runs, plugin_env, gpu_model, mode):
    vanilla, plugin = _runs(vllm_runs, plugin_env, gpu_model, mode)
    assert not vanilla.result["platform"].startswith("vllm_fl."), vanilla.result["platform"]
    assert "vllm_fl" not in str(vanilla.result["layer_classes"])
    assert plugin.result["platform"] == "vllm_fl.platform.cuda.PlatformFL", plugin.lines("vllm_fl")
    assert len(plugin.result["tokens"][0]) == 24
    assert plugin.result["tokens"] == vanilla.result["tokens"]


@pytest.mark.parametrize("mode", MODES)
def test_our_layers_run_forward_oot_on_gpu(vllm_runs, plugin_env, gpu_model, mode):
    _, plugin = _runs(vllm_runs, plugin_env, gpu_model, mode)
    result = plugin.result
    for layer in REPLACED:
        assert result["layer_classes"][layer].startswith("vllm_fl.ops."), result["layer_classes"]
        assert result["forward_methods"][layer] == "forward_oot", result["forward_methods"]
    assert plugin.lines("replaced vLLM layers: "), plugin.lines("vllm_fl")
    if mode == "eager":
        # the shipped CUDA policy (config/cuda.yaml, prefer: vendor) for eager calls
        used = {op: result["used_impls"].get(op) for op in REPLACED.values()}
        assert used == {op: "vendor.cuda" for op in REPLACED.values()}, result["used_impls"]


@pytest.mark.parametrize("mode", MODES)
def test_linear_layers_and_lm_head_run_op_linear_on_gpu(vllm_runs, plugin_env, gpu_model, mode):
    """The shipped CUDA policy computes the unquantized GEMMs as vanilla vLLM does: eager calls
    on the cuda impl (F.linear, cuBLAS), traced ones on the reference (the same aten.linear in
    the compiled graph); the LM head's calls, outside the graph, eager in both modes."""
    _, plugin = _runs(vllm_runs, plugin_env, gpu_model, mode)
    result = plugin.result
    assert len(result["linear_sites"]) == 2, result["linear_sites"]
    assert result["linear_calls"]["lm_head"] > 0, result["linear_calls"]
    assert result["used_impls"]["linear"] == "vendor.cuda", result["used_impls"]
    if mode == "eager":
        assert result["linear_calls"]["linear_layers"] > 0, result["linear_calls"]
    else:
        assert result["used_impls_traced"]["linear"] == "reference.torch", result

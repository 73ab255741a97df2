"""Real vLLM (its CPU build) running a tiny Qwen3-MoE with and without the plugin's platform.

Under an out-of-tree platform vLLM leaves the unquantized MoE computation to the platform's
plugin; these runs show that the plugin supplies it: the same greedy tokens as vanilla vLLM, our
MoE method bound to forward_oot, and every MoE op (routing through vLLM's
``vllm._custom_ops.topk_softmax``, the experts through ``fused_experts``) selected by the dispatch;
the attention layers run the plugin's attention backend, and no kernel of vLLM's runs for MoE or
attention.
"""

from __future__ import annotations

import pytest
from vllm_fl.testing.models import build_tiny_qwen3_moe
from vllm_fl.testing.census import TASK as CENSUS
from vllm_fl.testing.launch import PLUGIN_OFF, PLUGIN_ON, run_vllm, vllm_available

pytestmark = pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")

MOE_OPS = ("topk_softmax", "fused_experts")


@pytest.fixture(scope="module")
def moe_model(tmp_path_factory):
    return build_tiny_qwen3_moe(tmp_path_factory.mktemp("tiny-qwen3-moe"))


@pytest.fixture(scope="module")
def moe_runs(moe_model):
    model = moe_model
    return {
        "vanilla": run_vllm(model, PLUGIN_OFF, max_tokens=16),
        "plugin": run_vllm(model, PLUGIN_ON, max_tokens=16),
        # vLLM's default process layout: the model runs in the engine core's process
        "plugin, multi-process": run_vllm(
            model, {**PLUGIN_ON, "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}, max_tokens=16
        ),
    }


def test_moe_model_generates_the_same_tokens_as_vanilla_vllm(moe_runs):
    vanilla, plugin = moe_runs["vanilla"], moe_runs["plugin"]
    assert vanilla.result["platform"].endswith(".CpuPlatform"), vanilla.result["platform"]
    assert plugin.result["platform"].endswith(".PlatformFLCpu"), plugin.result["platform"]
    assert plugin.result["tokens"] == vanilla.result["tokens"]
    assert len(plugin.result["tokens"][0]) == 16


def test_multi_process_mode_generates_vanillas_tokens_on_our_attention(moe_runs):
    run = moe_runs["plugin, multi-process"]
    assert run.result["tokens"] == moe_runs["vanilla"].result["tokens"]
    chosen = run.lines("vllm_fl: attention backend vllm_fl.attention.backend.AttentionBackendFL")
    assert chosen and not [ln for ln in chosen if "MainProcess" in ln], chosen


def test_our_moe_method_and_ops_ran(moe_runs):
    result = moe_runs["plugin"].result
    assert list(result["attention_backends"]) == ["vllm_fl.attention.backend.AttentionBackendFL"]
    method = result["layer_classes"]["UnquantizedFusedMoEMethod"]
    assert method == "vllm_fl.moe.UnquantizedFusedMoEMethodFL", method
    assert result["forward_methods"]["UnquantizedFusedMoEMethod"] == "forward_oot"
    for op in MOE_OPS:
        assert result["used_impls"].get(op) == "reference.torch", result["used_impls"]
    assert moe_runs["plugin"].lines("vllm._custom_ops.topk_softmax -> topk_softmax")


def _census(model, env: dict[str, str]) -> dict:
    return run_vllm(model, env, max_tokens=4, num_prompts=2, timeout=300, task=CENSUS).result


def test_no_vllm_moe_or_attention_kernel_runs_under_the_plugin(moe_model):
    """The profiler sees vLLM's own MoE and attention kernels (and cache writes) in vanilla
    vLLM, and none with the plugin: its attention backend ran the dispatch's ops."""
    vanilla = _census(moe_model, PLUGIN_OFF)
    plugin = _census(moe_model, PLUGIN_ON)
    assert vanilla["moe_kernel_calls"] > 0, vanilla
    assert plugin["moe_kernel_calls"] == 0, plugin["moe"]
    assert plugin["used_impls"]["fused_experts"] == "reference.torch", plugin
    assert vanilla["attention_kernel_calls"] > 0, vanilla
    assert plugin["attention_kernel_calls"] == 0, plugin["attention"]
    assert plugin["used_impls"]["paged_attention"] == "reference.torch", plugin

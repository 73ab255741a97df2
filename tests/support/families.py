"""What the model-family end-to-end tests assert of a vanilla run and a plugin run of one tiny
checkpoint (`tests/vllm/test_vllm_families_e2e.py`, `tests/vllm/test_vllm_more_families_e2e.py`)."""

from __future__ import annotations

#: output tokens per prompt of a family's runs (two prompts each)
MAX_TOKENS = 8
NUM_PROMPTS = 2
#: the attention backend the plugin's platform gives a decoder's attention layers
PLUGIN_ATTENTION = "vllm_fl.attention.backend.AttentionBackendFL"
#: the impl class of the plugin's attention backend (also of vLLM's subclasses of the backend)
PLUGIN_ATTENTION_IMPL = "vllm_fl.attention.backend.AttentionImplFL"


def assert_same_tokens(runs: dict) -> None:
    """The plugin run (on the plugin's CPU platform) generated vanilla vLLM's greedy tokens."""
    vanilla, plugin = runs["vanilla"].result, runs["plugin"].result
    assert vanilla["platform"].endswith(".CpuPlatform"), vanilla["platform"]
    assert plugin["platform"].endswith(".PlatformFLCpu"), plugin["platform"]
    assert len(plugin["tokens"]) == NUM_PROMPTS, plugin["tokens"]
    assert all(len(t) == MAX_TOKENS for t in plugin["tokens"]), plugin["tokens"]
    assert plugin["tokens"] == vanilla["tokens"]


def assert_layers_ran_on_the_dispatch(result: dict, layers: dict[str, str]) -> None:
    """Each in-tree layer of `layers` was built as the plugin's class and bound its
    ``forward_oot``, and each op of `layers` is served by the reference."""
    for layer, op in layers.items():
        assert result["layer_classes"][layer].startswith("vllm_fl."), result["layer_classes"]
        assert result["forward_methods"][layer] == "forward_oot", result["forward_methods"]
        assert result["used_impls"].get(op) == "reference.torch", result["used_impls"]


def assert_ran_on_the_dispatch(result: dict, layers: dict[str, str]) -> None:
    """`assert_layers_ran_on_the_dispatch`, and the model's attention is the plugin's
    backend."""
    assert_layers_ran_on_the_dispatch(result, layers)
    assert list(result["attention_backends"]) == [PLUGIN_ATTENTION], result["attention_backends"]


def assert_moe_ran_on_the_dispatch(result: dict) -> None:
    """The model's unquantized experts ran through the plugin's MoE method and the op
    ``fused_experts`` on the reference."""
    method = result["layer_classes"]["UnquantizedFusedMoEMethod"]
    assert method == "vllm_fl.moe.UnquantizedFusedMoEMethodFL", method
    assert result["used_impls"].get("fused_experts") == "reference.torch", result["used_impls"]


#: the Mamba2 mixer's kernels the plugin routes through their ops (`vllm_fl.mamba`)
MAMBA2_OPS = (
    "causal_conv1d_fn",
    "causal_conv1d_update",
    "mamba_chunk_scan_combined",
    "selective_state_update",
)


def assert_mamba2_kernels_ran_on_the_dispatch(result: dict) -> None:
    """The Mamba2 mixer's four kernels were replaced in the mixer's module and called through
    their ops (prefill: conv1d and the SSD scan; decode: conv1d update and the SSM step), each
    served by the reference."""
    sites = result["mamba_sites"]
    assert len(sites) == len(MAMBA2_OPS), sites
    calls = result["mamba_calls"]
    for op in MAMBA2_OPS:
        assert calls.get(op, 0) > 0, calls
        assert result["used_impls"].get(op) == "reference.torch", result["used_impls"]

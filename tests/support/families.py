"""What the model-family end-to-end tests run and assert of a vanilla run and a plugin run of one
tiny checkpoint (`tests/vllm/test_vllm_families_e2e.py`, `tests/vllm/test_vllm_more_families_e2e.py`,
`tests/vllm/test_vllm_dense_families_e2e.py`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from vllm_fl.testing.launch import PLUGIN_OFF, PLUGIN_ON, VllmRun
from vllm_fl.testing.models import HIDDEN_SIZE

from tests.support import shared

#: output tokens per prompt of a family's runs (two prompts each)
MAX_TOKENS = 8
NUM_PROMPTS = 2
#: the attention backend the plugin's platform gives a decoder's attention layers
PLUGIN_ATTENTION = "vllm_fl.attention.backend.AttentionBackendFL"
#: the impl class of the plugin's attention backend (also of vLLM's subclasses of the backend)
PLUGIN_ATTENTION_IMPL = "vllm_fl.attention.backend.AttentionImplFL"
#: the engine task that embeds the text prompts instead of generating
EMBED_TASK = "vllm_fl.testing.engine:embed_task"


def family_runs(
    vllm_runs: Callable[..., VllmRun],
    family: str,
    build: Callable[[Path], Path],
    vanilla_args: dict | None = None,
    **kwargs: object,
) -> dict[str, VllmRun]:
    """The vanilla and the plugin run of `family`'s tiny checkpoint (built by `build` once per
    session), each made once per session; `kwargs` go to `run_vllm` (`vanilla_args`: vLLM
    arguments of the vanilla run only)."""
    model = shared.folder_once(f"tiny-{build.__name__.removeprefix('build_tiny_')}", build)
    runs = {}
    for label, env in (("vanilla", PLUGIN_OFF), ("plugin", PLUGIN_ON)):
        extra = vanilla_args if label == "vanilla" and vanilla_args else {}
        llm_args = {**(kwargs.get("llm_args") or {}), **extra}
        runs[label] = vllm_runs(
            f"{family}, {label}",
            env,
            model=model,
            max_tokens=MAX_TOKENS,
            num_prompts=NUM_PROMPTS,
            **{**kwargs, "llm_args": llm_args},
        )
    return runs


def assert_same_embeddings(runs: dict, atol: float) -> None:
    """The plugin run embedded each prompt as vanilla did, within `atol` per element (both runs
    compute in float32, the plugin's layers in the reference's PyTorch ops, vanilla's in vLLM's
    CPU kernels), and the prompts apart."""
    vanilla, plugin = runs["vanilla"].result, runs["plugin"].result
    assert vanilla["platform"].endswith(".CpuPlatform"), vanilla["platform"]
    assert plugin["platform"].endswith(".PlatformFLCpu"), plugin["platform"]
    assert len(plugin["embeddings"]) == NUM_PROMPTS
    assert all(len(e) == HIDDEN_SIZE for e in plugin["embeddings"])
    # two prompts, two different embeddings: a run that ignored its input would not pass
    assert plugin["embeddings"][0] != plugin["embeddings"][1]
    worst = max(
        abs(p - v)
        for pe, ve in zip(plugin["embeddings"], vanilla["embeddings"], strict=True)
        for p, v in zip(pe, ve, strict=True)
    )
    assert worst <= atol, worst


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

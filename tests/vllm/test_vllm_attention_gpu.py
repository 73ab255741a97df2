"""The plugin's attention backend in real vLLM on an NVIDIA GPU (the tiny Llama in bfloat16).

The shipped CUDA policy keeps vLLM's FlashAttention backend (the cuda impl of
``attention_backend``); these runs route ``attention_backend`` to flagos, so vLLM builds the
attention layers on ``vllm_fl.attention.AttentionBackendFL``, and its two ops to one backend:

- flagos (FlagGems' FlashAttention-2 for batches with prefills, vLLM's Triton
  ``unified_attention`` for decodes, FlagGems' cache write): the same greedy tokens as vanilla
  vLLM on its own Triton backend (``attention_backend="TRITON_ATTN"``, the same decode kernel),
  in eager mode and compiled (Inductor, with vLLM's CUDA graphs capturing the attention layers:
  the backend keeps the Triton metadata builder's full-graph support);
- cuda (FlashAttention with the block table, vLLM's cache write): the same tokens as vanilla
  vLLM on FlashAttention.

Marked ``gpu``: needs vLLM's CUDA build and FlagGems.
"""

from __future__ import annotations

import pytest

from tests.support.plugin_env import checkout_plugin_env
from vllm_fl.testing.launch import PLUGIN_NAME
from vllm_fl.testing.models import build_tiny_llama

pytestmark = pytest.mark.gpu("vllm", "flag_gems")

DTYPE = "bfloat16"
BASE = {"VLLM_USE_FLASHINFER_SAMPLER": "0"}
PLUGIN_BACKEND = "vllm_fl.attention.backend.AttentionBackendFL"
OPS = ("reshape_and_cache_flash", "paged_attention")


def _per_op(token: str) -> str:
    return ";".join(["attention_backend=flagos", *(f"{op}={token}" for op in OPS)])


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory) -> dict[str, str]:
    return {
        **BASE,
        **checkout_plugin_env(tmp_path_factory.mktemp("plugin-dist")),
        "VLLM_PLUGINS": PLUGIN_NAME,
    }


@pytest.fixture(scope="module")
def gpu_model(tmp_path_factory):
    """The tiny Llama with head_dim 64, which every GPU attention kernel supports."""
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama-attention"), hidden_size=128)


def _assert_ours_ran(run, impl_id: str) -> None:
    result = run.result
    assert result["platform"] == "vllm_fl.platform.cuda.PlatformFL", run.lines("vllm_fl")
    assert list(result["attention_backends"]) == [PLUGIN_BACKEND], result["attention_backends"]
    for op in OPS:
        assert result["used_impls"].get(op) == impl_id, result["used_impls"]


@pytest.mark.parametrize("mode", ["eager", "compile"])
def test_flagos_attention_generates_vllms_triton_tokens(vllm_runs, plugin_env, gpu_model, mode):
    common = dict(mode=mode, dtype=DTYPE, model=gpu_model)
    vanilla = vllm_runs(
        f"gpu {mode}, vLLM's Triton attention",
        {**BASE, "VLLM_PLUGINS": "none"},
        llm_args={"attention_backend": "TRITON_ATTN"},
        **common,
    )
    plugin = vllm_runs(
        f"gpu {mode}, flagos attention",
        {**plugin_env, "VLLM_FL_PER_OP": _per_op("flagos")},
        **common,
    )
    _assert_ours_ran(plugin, "default.flagos")
    assert plugin.result["tokens"] == vanilla.result["tokens"]


def test_cuda_attention_ops_generate_vllms_flash_attention_tokens(vllm_runs, plugin_env, gpu_model):
    common = dict(mode="eager", dtype=DTYPE, model=gpu_model)
    vanilla = vllm_runs(
        "gpu eager, vLLM's FlashAttention", {**BASE, "VLLM_PLUGINS": "none"}, **common
    )
    plugin = vllm_runs(
        "gpu eager, cuda attention ops",
        {**plugin_env, "VLLM_FL_PER_OP": _per_op("vendor")},
        **common,
    )
    _assert_ours_ran(plugin, "vendor.cuda")
    assert plugin.result["tokens"] == vanilla.result["tokens"]


def test_the_shipped_policy_keeps_vllms_flash_attention(vllm_runs, plugin_env, gpu_model):
    run = vllm_runs(
        "gpu eager, shipped attention", plugin_env, mode="eager", dtype=DTYPE, model=gpu_model
    )
    backends = list(run.result["attention_backends"])
    assert backends == ["vllm.v1.attention.backends.flash_attn.FlashAttentionBackend"], backends

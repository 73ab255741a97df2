"""vLLM's in-place weight reload on an NVIDIA GPU with the plugin's CUDA platform, vLLM's
default process layout: the tiny 4-bit GPTQ Llama (bfloat16; Machete on Hopper, whose canonical
weights the cuda impl releases) reloaded from a checkpoint whose scales are negated generates
that checkpoint's tokens, as an engine started on it does. Marked ``gpu``: `make test-gpu`
runs it."""

from __future__ import annotations

import pytest
from tests.support.plugin_env import checkout_plugin_env

from vllm_fl.testing.launch import PLUGIN_NAME, run_vllm
from vllm_fl.testing.models import build_tiny_gptq_llama

pytestmark = pytest.mark.gpu("vllm")

DTYPE = "float16"  # GPTQ's methods take 16-bit activations


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory) -> dict[str, str]:
    env = checkout_plugin_env(tmp_path_factory.mktemp("plugin-dist"))
    return {
        **env,
        "VLLM_PLUGINS": PLUGIN_NAME,
        "VLLM_USE_FLASHINFER_SAMPLER": "0",
        "VLLM_ENABLE_V1_MULTIPROCESSING": "1",
    }


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from safetensors.torch import load_file, save_file

    root = tmp_path_factory.mktemp("tiny-gptq-reload")
    first = build_tiny_gptq_llama(root / "first")
    second = build_tiny_gptq_llama(root / "second")
    weights = load_file(str(second / "model.safetensors"))
    for name in [n for n in weights if n.endswith(".scales")]:
        weights[name] = -weights[name]  # every projection's weight negated
    save_file(weights, str(second / "model.safetensors"))
    return first, second


def test_a_reloaded_w4a16_model_generates_the_new_checkpoints_tokens(plugin_env, models):
    first, second = models
    reloaded = run_vllm(
        first,
        plugin_env,
        dtype=DTYPE,
        task="vllm_fl.testing.engine:reload_task",
        task_options={"weights_path": str(second)},
    )
    direct = run_vllm(second, plugin_env, dtype=DTYPE)
    assert reloaded.result["platform"] == "vllm_fl.platform.PlatformFL"
    assert reloaded.result["after"] == direct.result["tokens"]
    assert reloaded.result["before"] != reloaded.result["after"]

"""vLLM's in-place weight reload under the plugin (its worker's ``reload_weights``, what RL
weight updates call): real vLLM on the plugin's CPU platform, vLLM's default process layout, the
tiny 4-bit GPTQ Llama (its GEMMs through ``wna16_gemm``) reloaded with another checkpoint's
weights generates that checkpoint's tokens; and what ``vllm_fl.reload.reloading`` does to
released weights and derived values."""

from __future__ import annotations

import pytest
import torch

from vllm_fl.kernels import resident
from vllm_fl.kernels.memo import TensorMemo
from vllm_fl.reload import reloading
from vllm_fl.testing.launch import PLUGIN_ON, run_vllm, vllm_available
from vllm_fl.testing.models import build_tiny_gptq_llama

PLUGIN_MULTIPROCESS = {**PLUGIN_ON, "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}
DTYPE = "float16"  # GPTQ's methods take 16-bit activations


class _Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(4, 4), requires_grad=False)


def test_a_released_weight_takes_the_reloaded_values_and_derived_values_follow():
    layer, memo = _Layer(), TensorMemo()
    derived = memo.get(layer.weight, None, lambda: layer.weight * 2)
    resident.release(layer.weight)
    with reloading(layer):
        # vLLM writes through .data into the tensors it keeps (the same ones CUDA graphs hold)
        layer.weight.data.copy_(torch.full((4, 4), 3.0))
    assert not resident.is_released(layer.weight)
    again = memo.get(layer.weight, None, lambda: layer.weight * 2)
    assert again is not derived and torch.equal(again, torch.full((4, 4), 6.0))


@pytest.fixture(scope="module")
def gptq_models(tmp_path_factory):
    """Two tiny GPTQ Llamas: the second's scales negated, so every projection's weight is."""
    from safetensors.torch import load_file, save_file

    root = tmp_path_factory.mktemp("tiny-gptq-reload")
    first = build_tiny_gptq_llama(root / "first")
    second = build_tiny_gptq_llama(root / "second")
    weights = load_file(str(second / "model.safetensors"))
    for name in [n for n in weights if n.endswith(".scales")]:
        weights[name] = -weights[name]
    save_file(weights, str(second / "model.safetensors"))
    return first, second


@pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")
def test_reloaded_weights_generate_the_other_checkpoints_tokens(gptq_models):
    first, second = gptq_models
    reloaded = run_vllm(
        first,
        PLUGIN_MULTIPROCESS,
        dtype=DTYPE,
        task="vllm_fl.testing.engine:reload_task",
        task_options={"weights_path": str(second)},
    )
    direct = run_vllm(second, PLUGIN_MULTIPROCESS, dtype=DTYPE)
    assert reloaded.result["platform"].endswith(".PlatformFLCpu")
    assert reloaded.result["after"] == direct.result["tokens"]
    assert reloaded.result["before"] != reloaded.result["after"]

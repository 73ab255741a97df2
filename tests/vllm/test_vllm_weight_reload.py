"""vLLM's in-place weight reload under the plugin (its worker's ``reload_weights``, what RL
weight updates call): real vLLM on the plugin's CPU platform, vLLM's default process layout, the
tiny Llama reloaded with another checkpoint's weights generates that checkpoint's tokens; and
what ``vllm_fl.reload.reloading`` does to released weights and derived values."""

from __future__ import annotations

import pytest
import torch

from vllm_fl.kernels import resident
from vllm_fl.kernels.memo import TensorMemo
from vllm_fl.reload import reloading
from vllm_fl.testing.launch import PLUGIN_ON, run_vllm, vllm_available

PLUGIN_MULTIPROCESS = {**PLUGIN_ON, "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}


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
def flipped_model(tiny_model, tmp_path_factory):
    """The tiny Llama with every projection's rows reversed: other weights, other tokens."""
    import shutil

    from safetensors.torch import load_file, save_file

    path = tmp_path_factory.mktemp("tiny-llama-flipped")
    shutil.copytree(tiny_model, path, dirs_exist_ok=True)
    weights = load_file(str(path / "model.safetensors"))
    for name, tensor in weights.items():
        if name.endswith("proj.weight"):
            weights[name] = tensor.flip(0).contiguous()
    save_file(weights, str(path / "model.safetensors"))
    return path


@pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")
def test_reloaded_weights_generate_the_other_checkpoints_tokens(tiny_model, flipped_model):
    reloaded = run_vllm(
        tiny_model,
        PLUGIN_MULTIPROCESS,
        task="vllm_fl.testing.engine:reload_task",
        task_options={"weights_path": str(flipped_model)},
    )
    direct = run_vllm(flipped_model, PLUGIN_MULTIPROCESS)
    assert reloaded.result["platform"].endswith(".PlatformFLCpu")
    assert reloaded.result["after"] == direct.result["tokens"]
    assert reloaded.result["before"] != reloaded.result["after"]

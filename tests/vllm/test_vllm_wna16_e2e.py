"""Real vLLM (its CPU build) with the plugin on weight-only quantized checkpoints: a tiny 4-bit
GPTQ Llama and a tiny 4-bit AWQ one (weights quantised from the tiny model's, with zero points
for AWQ) generate the same greedy tokens on the plugin's CPU platform, where the layers' GEMMs run
through the op ``wna16_gemm``, as on vLLM's own CPU platform with its ``cpu_gemm_wna16`` kernel.
vLLM's CPU build has no 8-bit GPTQ kernel; a tiny 8-bit GPTQ Llama generates under the plugin the
tokens vanilla vLLM generates for the float model of its dequantised weights. The plugin's runs
use vLLM's default process layout."""

from __future__ import annotations

import pytest
from vllm_fl.testing.models import (
    build_tiny_awq_llama,
    build_tiny_gptq_llama,
    build_tiny_llama,
    build_tiny_quantized_llama,
)

from vllm_fl.testing.launch import PLUGIN_OFF, PLUGIN_ON, vllm_available

from tests.support.cpu_kernels import needs_avx512_kernels

pytestmark = pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")

# GPTQ's methods take 16-bit activations only. float16: in bfloat16, two correct kernels that
# round differently (the reference's float32 accumulation, vLLM's CPU kernel) make this small
# model's greedy tokens drift apart after a few steps.
DTYPE = "float16"
PLUGIN_MULTIPROCESS = {**PLUGIN_ON, "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}


@pytest.fixture(scope="module")
def dequantised_w8_model(tmp_path_factory):
    """The tiny Llama whose projections are the 8-bit GPTQ model's weights, dequantised: a float
    checkpoint computing what the quantized one does."""
    folder = tmp_path_factory.mktemp("tiny-llama-w8-dequantised")
    return build_tiny_quantized_llama(folder, "w8a16-gptq", dequantised=True)


@pytest.fixture(scope="module")
def gptq_w4_model(tmp_path_factory):
    return build_tiny_gptq_llama(tmp_path_factory.mktemp("tiny-gptq-w4-llama"))


@pytest.fixture(scope="module")
def gptq_w8_model(tmp_path_factory):
    return build_tiny_gptq_llama(tmp_path_factory.mktemp("tiny-gptq-w8-llama"), quant="w8a16-gptq")


@pytest.fixture(scope="module")
def awq_w4_model(tmp_path_factory):
    return build_tiny_awq_llama(tmp_path_factory.mktemp("tiny-awq-w4-llama"))


def _dispatched_through_wna16(
    run, quantization: str = "auto_gptq", method: str = "AutoGPTQLinearMethod"
) -> None:
    assert run.result["platform"].endswith(".PlatformFLCpu")
    assert run.lines(f"vllm_fl: quantization {quantization!r}: the plugin dispatches")
    assert run.lines(f"Using WNA16KernelFL for {method}")
    assert run.lines("Op 'wna16_gemm' using 'reference.torch'")


@needs_avx512_kernels(
    "its AVX2 library has no cpu_gemm_wna16, so vanilla vLLM cannot run a W4A16 checkpoint"
)
def test_gptq_w4a16_generates_vanillas_tokens_through_the_dispatch(vllm_runs, gptq_w4_model):
    vanilla = vllm_runs("gptq w4a16, plugin off", PLUGIN_OFF, model=gptq_w4_model, dtype=DTYPE)
    plugin = vllm_runs(
        "gptq w4a16, plugin on, multi-process",
        PLUGIN_MULTIPROCESS,
        model=gptq_w4_model,
        dtype=DTYPE,
        watch_engine=True,
    )
    assert vanilla.lines("Using CPUWNA16LinearKernel for AutoGPTQLinearMethod")
    _dispatched_through_wna16(plugin)
    tokens = plugin.result["tokens"]
    assert tokens == vanilla.result["tokens"]
    assert len(set(tokens[0])) > 4, tokens  # not a degenerate repetition


def test_gptq_w8a16_generates_the_dequantised_models_tokens_where_vllms_cpu_build_has_none(
    vllm_runs, gptq_w8_model, dequantised_w8_model
):
    float_run = vllm_runs(
        "dequantised w8, plugin off", PLUGIN_OFF, model=dequantised_w8_model, dtype=DTYPE
    )
    plugin = vllm_runs(
        "gptq w8a16, plugin on, multi-process",
        PLUGIN_MULTIPROCESS,
        model=gptq_w8_model,
        dtype=DTYPE,
        watch_engine=True,
    )
    _dispatched_through_wna16(plugin)
    tokens = plugin.result["tokens"]
    assert tokens == float_run.result["tokens"]
    assert len(set(tokens[0])) > 4, tokens


def test_the_tiny_awq_checkpoint_unpacks_with_vllms_order_to_the_float_weights(
    awq_w4_model, tmp_path
):
    """The AWQ builder's packing, read back with vLLM's own AWQ order and AWQ's
    ``(q - zero) * scale``: each projection's float weight within half a quantisation step."""
    import torch
    from safetensors.torch import load_file
    from vllm.model_executor.layers.quantization.auto_awq import _REVERSE_AWQ_PACK_ORDER

    group = 128
    shifts = torch.arange(0, 32, 4, dtype=torch.int32)

    def unpack(words: torch.Tensor) -> torch.Tensor:  # [R, N / 8] -> [R, N]
        nibbles = (words.unsqueeze(-1) >> shifts) & 0xF
        return nibbles[:, :, _REVERSE_AWQ_PACK_ORDER].reshape(words.shape[0], -1)

    quantised = load_file(str(awq_w4_model / "model.safetensors"))
    floats = load_file(
        str(build_tiny_llama(tmp_path / "float", hidden_size=256) / "model.safetensors")
    )
    prefixes = [name.removesuffix("qweight") for name in quantised if name.endswith("qweight")]
    assert len(prefixes) == 14  # 7 projections in each of 2 layers
    for prefix in prefixes:
        scales = quantised[prefix + "scales"].float().repeat_interleave(group, dim=0)
        zeros = unpack(quantised[prefix + "qzeros"]).repeat_interleave(group, dim=0)
        weight = (unpack(quantised[prefix + "qweight"]) - zeros).float() * scales
        original = floats[prefix + "weight"].t().float()  # [K, N]
        assert weight.shape == original.shape
        assert ((weight - original).abs() <= scales / 2 * 1.01).all(), prefix


@needs_avx512_kernels(
    "its AVX2 library has no cpu_gemm_wna16, so vanilla vLLM cannot run a W4A16 checkpoint"
)
def test_awq_w4a16_generates_vanillas_tokens_through_the_dispatch(vllm_runs, awq_w4_model):
    vanilla = vllm_runs("awq w4a16, plugin off", PLUGIN_OFF, model=awq_w4_model, dtype=DTYPE)
    plugin = vllm_runs(
        "awq w4a16, plugin on, multi-process",
        PLUGIN_MULTIPROCESS,
        model=awq_w4_model,
        dtype=DTYPE,
        watch_engine=True,
    )
    assert vanilla.lines("Using CPUWNA16LinearKernel for AutoAWQMarlinLinearMethod")
    _dispatched_through_wna16(plugin, "auto_awq", "AutoAWQMarlinLinearMethod")
    tokens = plugin.result["tokens"]
    assert tokens == vanilla.result["tokens"]
    assert len(set(tokens[0])) > 4, tokens  # not a degenerate repetition

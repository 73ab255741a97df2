"""The quantized and derived test inputs shared by the compile/opcheck samples and the
benchmarks: which arguments a quantized input sets, in which layout, from which draws, and a
derived input calling the reference impl package's function."""

from __future__ import annotations

import pytest
import torch

from vllm_fl.testing.inputs import derived_input, quantized_input


def test_a_quantized_input_sets_its_values_scales_and_zero_points():
    gen = torch.Generator().manual_seed(3)
    original, args = quantized_input(
        "a", (5, 32), "int8_token_asym", scales="scale_a", zeros="azp", generator=gen
    )
    assert set(args) == {"a", "scale_a", "azp"}
    assert args["a"].dtype == torch.int8 and args["a"].shape == (5, 32)
    assert args["scale_a"].shape == (5, 1) and args["azp"].dtype == torch.int32
    # the original is the generator's next normal draw, unscaled (scale None: std 1)
    assert torch.equal(original, torch.randn(5, 32, generator=torch.Generator().manual_seed(3)))
    dequantised = (args["a"].float() - args["azp"]) * args["scale_a"]
    assert (dequantised - original).abs().max() <= args["scale_a"].max() / 2 + 1e-6


def test_a_transposed_quantized_input_is_the_transposed_view_of_its_scaled_draw():
    gen = torch.Generator().manual_seed(0)
    original, args = quantized_input(
        "b", [64, 32], "int8_channel", "scale_b", transpose=True, scale=0.25, generator=gen
    )
    drawn = torch.randn(64, 32, generator=torch.Generator().manual_seed(0)) * 0.25
    assert torch.equal(original, drawn.t())
    assert args["b"].shape == (32, 64) and args["b"].stride() == (1, 32)  # vLLM's [K, N] view
    assert args["scale_b"].shape == (64, 1)  # one per output channel, of the untransposed rows


def test_a_grouped_scheme_gets_its_group():
    _, args = quantized_input(
        "w", (2, 256, 128), "fp8_block", "w_scale", group=[128, 128], generator=None
    )
    assert args["w"].dtype == torch.float8_e4m3fn and args["w_scale"].shape == (2, 2, 1)
    with pytest.raises(ValueError, match="'fp8_block'.*group is None"):
        quantized_input("w", (256, 128), "fp8_block", "w_scale")


def test_a_derived_input_is_the_reference_function_of_the_other_arguments():
    x = torch.tensor([[1.0, -2.0], [0.5, 0.0]])
    scale = derived_input("quant", "scaled_int8_quant_static_scale", {"x": x})
    torch.testing.assert_close(scale, torch.tensor([2.0 / 127]))
    with pytest.raises(AttributeError, match="no_such_function"):
        derived_input("quant", "no_such_function", {"x": x})

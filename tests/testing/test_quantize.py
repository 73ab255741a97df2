"""The quantisation schemes of the parity tests' quantized inputs, checked against math written
here: shapes and dtypes, a scale per group from its largest value, dequantised values within half
a quantisation step of the original, the asymmetric zero point; and the names the generator
accepts are the table's."""

from __future__ import annotations

import math
import re

import pytest
import torch

from codegen.model import QUANT_SCHEMES
from vllm_fl.testing.quantize import SCHEMES, quantize

FP8 = torch.float8_e4m3fn


def _normal(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def _per_value(scales: torch.Tensor, shape: tuple[int, ...], rows: int, cols: int):
    """Each value's scale: the scale of the block (index // block size) holding it."""
    row_index = torch.arange(shape[-2]) // rows
    col_index = torch.arange(shape[-1]) // cols
    return scales[..., row_index, :][..., col_index]


def _block_amax_by_loop(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    n, k = x.shape[-2:]
    out = torch.empty(*x.shape[:-2], math.ceil(n / rows), math.ceil(k / cols))
    for i in range(out.shape[-2]):
        for j in range(out.shape[-1]):
            block = x[..., i * rows : (i + 1) * rows, j * cols : (j + 1) * cols]
            out[..., i, j] = block.abs().flatten(-2).amax(-1)
    return out


def _fp8_half_step(v: torch.Tensor) -> torch.Tensor:
    """Half the spacing of float8_e4m3fn around v: 3 mantissa bits, 2^-6 the smallest normal
    exponent (below it the subnormal spacing 2^-9)."""
    exponent = torch.floor(torch.log2(v.abs().clamp(min=2.0**-6)))
    return 2.0 ** (exponent - 3) / 2


def _check_fp8(x, result, rows, cols, scale_shape):
    assert result.q.dtype == FP8 and result.q.shape == x.shape
    assert result.scales.dtype == torch.float32 and tuple(result.scales.shape) == scale_shape
    assert result.zeros is None
    expected_scales = _block_amax_by_loop(x, rows, cols) / 448.0
    torch.testing.assert_close(result.scales, expected_scales, rtol=1e-6, atol=0)
    scale = _per_value(result.scales, tuple(x.shape), rows, cols)
    exact = x / scale  # in [-448, 448] by construction
    error = (result.q.float() - exact).abs()
    assert (error <= _fp8_half_step(exact) * (1 + 1e-6)).all()
    # each block's largest value lands on the format's largest, 448
    assert torch.equal(
        _block_amax_by_loop(result.q.float(), rows, cols),
        torch.full_like(result.scales, 448.0),
    )


def test_fp8_tensor_has_one_scale_from_the_largest_value():
    x = _normal(5, 3, 24)
    result = quantize(x, "fp8_tensor")
    assert result.q.dtype == FP8 and result.q.shape == x.shape
    assert result.scales.shape == (1,) and result.scales.dtype == torch.float32
    torch.testing.assert_close(result.scales, x.abs().max().reshape(1) / 448.0, rtol=1e-6, atol=0)
    exact = x / result.scales
    assert ((result.q.float() - exact).abs() <= _fp8_half_step(exact) * (1 + 1e-6)).all()
    assert result.q.float().abs().max() == 448.0


def test_fp8_token_has_a_scale_per_row():
    x = _normal(7, 40)
    _check_fp8(x, quantize(x, "fp8_token"), 1, 40, (7, 1))


@pytest.mark.parametrize("k", [128, 200], ids=["whole-groups", "partial-last-group"])
def test_fp8_group_has_a_scale_per_row_and_group(k):
    x = _normal(5, k)
    _check_fp8(x, quantize(x, "fp8_group", (1, 64)), 1, 64, (5, math.ceil(k / 64)))


@pytest.mark.parametrize(
    "shape, scale_shape",
    [
        ((256, 128), (2, 1)),
        ((200, 136), (2, 2)),
        ((3, 96, 80), (3, 1, 1)),
        ((2, 130, 64), (2, 2, 1)),
    ],
    ids=["2d", "2d-partial", "3d", "3d-partial"],
)
def test_fp8_block_has_a_scale_per_block(shape, scale_shape):
    x = _normal(*shape)
    _check_fp8(x, quantize(x, "fp8_block", (128, 128)), 128, 128, scale_shape)


def test_fp8_block_scales_follow_the_block_shape_not_a_square():
    x = _normal(64, 96)
    _check_fp8(x, quantize(x, "fp8_block", (16, 32)), 16, 32, (4, 3))


def test_an_all_zero_fp8_group_gets_vllms_smallest_scale_and_zeros():
    x = torch.zeros(2, 8)
    x[1] = _normal(8)
    result = quantize(x, "fp8_token")
    assert result.scales[0, 0] == pytest.approx(1.0 / (448.0 * 512.0))
    assert torch.equal(result.q[0].float(), torch.zeros(8))


def _check_int8_symmetric(x, result, scale_shape):
    assert result.q.dtype == torch.int8 and result.q.shape == x.shape
    assert result.scales.dtype == torch.float32 and tuple(result.scales.shape) == scale_shape
    assert result.zeros is None
    error = (result.q.float() * result.scales - x).abs()
    assert (error <= result.scales / 2 * (1 + 1e-5)).all()


def test_int8_tensor_is_symmetric_with_one_scale():
    x = _normal(6, 32)
    result = quantize(x, "int8_tensor")
    _check_int8_symmetric(x, result, (1,))
    torch.testing.assert_close(result.scales, x.abs().max().reshape(1) / 127, rtol=1e-6, atol=0)
    assert result.q.abs().max() == 127


@pytest.mark.parametrize("scheme", ["int8_token", "int8_channel"])
def test_int8_token_and_channel_are_symmetric_per_row(scheme):
    x = _normal(9, 48)
    result = quantize(x, scheme)
    _check_int8_symmetric(x, result, (9, 1))
    torch.testing.assert_close(
        result.scales, x.abs().amax(dim=1, keepdim=True) / 127, rtol=1e-6, atol=0
    )
    assert torch.equal(result.q.abs().amax(dim=1), torch.full((9,), 127, dtype=torch.int8))


def test_int8_channel_is_int8_token_on_the_rows_of_a_weight():
    assert SCHEMES["int8_channel"] is SCHEMES["int8_token"]


def test_int8_token_asym_maps_each_rows_range_onto_the_int8_range():
    x = _normal(11, 64) + torch.linspace(-0.5, 0.5, 11).reshape(11, 1)  # rows off-centre
    result = quantize(x, "int8_token_asym")
    assert result.q.dtype == torch.int8 and result.q.shape == x.shape
    assert result.scales.dtype == torch.float32 and result.scales.shape == (11, 1)
    assert result.zeros is not None
    assert result.zeros.dtype == torch.int32 and result.zeros.shape == (11, 1)
    lo, hi = x.amin(dim=1, keepdim=True), x.amax(dim=1, keepdim=True)
    torch.testing.assert_close(result.scales, (hi - lo) / 255, rtol=1e-6, atol=0)
    # the zero point: the integer that 0.0 maps to, inside the int8 range as 0 is in each row
    assert torch.equal(result.zeros, torch.round(-128 - lo / result.scales).to(torch.int32))
    assert ((result.zeros >= -128) & (result.zeros <= 127)).all()
    assert torch.equal(result.q.amin(dim=1), torch.full((11,), -128, dtype=torch.int8))
    assert torch.equal(result.q.amax(dim=1), torch.full((11,), 127, dtype=torch.int8))
    dequantised = (result.q.float() - result.zeros.float()) * result.scales
    assert ((dequantised - x).abs() <= result.scales / 2 * (1 + 1e-4)).all()


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_every_scheme_is_deterministic(scheme):
    x = _normal(4, 3, 64) if QUANT_SCHEMES[scheme].ranks in ((), (2, 3)) else _normal(12, 64)
    group = (16, 32) if scheme == "fp8_block" else (1, 32) if scheme == "fp8_group" else None
    first, second = quantize(x, scheme, group), quantize(x.clone(), scheme, group)
    assert torch.equal(first.q.view(torch.uint8), second.q.view(torch.uint8))  # FP8 too
    assert torch.equal(first.scales, second.scales)


def test_the_generator_accepts_exactly_the_tables_schemes():
    assert sorted(QUANT_SCHEMES) == sorted(SCHEMES)


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_each_scheme_takes_the_group_ranks_and_zeros_the_generator_checks(scheme):
    rules = QUANT_SCHEMES[scheme]
    group = None if rules.group is None else tuple(d or 16 for d in rules.group)
    for rank in rules.ranks or (1, 2, 3):
        x = _normal(*([32] * rank))
        result = SCHEMES[scheme](x, group)
        assert (result.zeros is not None) == rules.zeros
    for rank in {1, 2, 3, 4} - set(rules.ranks or (1, 2, 3, 4)):
        with pytest.raises(ValueError, match=r"scheme '\w+': x has shape \[32(, 32)*\]"):
            SCHEMES[scheme](_normal(*([32] * rank)), group)
    x = _normal(*([32] * (rules.ranks or (2,))[0]))
    if rules.group is None:
        with pytest.raises(ValueError, match="group is \\[1, 16\\], expected no group"):
            SCHEMES[scheme](x, (1, 16))
    else:
        expected = re.escape(f"group is None, expected {rules.group_form}")
        with pytest.raises(ValueError, match=expected):
            SCHEMES[scheme](x, None)


def test_fp8_group_refuses_a_group_of_several_rows():
    with pytest.raises(ValueError, match=r"group is \[2, 64\], expected \[1, g\]"):
        quantize(_normal(4, 128), "fp8_group", (2, 64))


def test_an_unknown_scheme_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown quantisation scheme 'int4'.*'fp8_tensor'"):
        quantize(_normal(4, 8), "int4")

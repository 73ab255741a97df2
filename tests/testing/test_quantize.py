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


#: weight-only scheme -> (bits, zero points)
WNA16 = {
    "wna16_w4": (4, False),
    "wna16_w4_zp": (4, True),
    "wna16_w8": (8, False),
    "wna16_w8_zp": (8, True),
}


def _unpack_by_bytes(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """The values of int32 words [K, N / p] along N, read through their little-endian bytes: a
    byte per 8-bit value, or its low nibble then its high one for 4 bits."""
    assert packed.dtype == torch.int32
    data = packed.contiguous().view(torch.uint8).to(torch.int32)  # [K, 4 * N / p]
    if bits == 8:
        return data
    return torch.stack([data & 0xF, data >> 4], dim=-1).reshape(packed.shape[0], -1)


def _groups(x: torch.Tensor, size: int) -> torch.Tensor:
    """x [K, N] as [K / G, G, N] by a loop over its groups of rows."""
    return torch.stack([x[i : i + size] for i in range(0, x.shape[0], size)])


@pytest.mark.parametrize("scheme", sorted(WNA16))
@pytest.mark.parametrize("size", [16, 32, 96], ids=["g16", "g32", "one-group"])
def test_wna16_packs_the_canonical_layout_along_n(scheme, size):
    bits, zero_points = WNA16[scheme]
    per_word = 32 // bits
    x = _normal(96, 64)
    result = quantize(x, scheme, (size,))
    assert result.q.dtype == torch.int32 and result.q.shape == (96, 64 // per_word)
    assert result.scales.dtype == torch.float32 and result.scales.shape == (96 // size, 64)
    if zero_points:
        assert result.zeros is not None
        assert result.zeros.dtype == torch.int32 and result.zeros.shape == (
            96 // size,
            64 // per_word,
        )
    else:
        assert result.zeros is None
    q = _unpack_by_bytes(result.q, bits)
    assert q.shape == x.shape and q.min() >= 0 and q.max() <= 2**bits - 1


@pytest.mark.parametrize("scheme", ["wna16_w4", "wna16_w8"])
def test_wna16_symmetric_scales_from_the_largest_value_around_the_types_bias(scheme):
    bits, _ = WNA16[scheme]
    bias, largest = 2 ** (bits - 1), 2 ** (bits - 1) - 1  # 8 and 7 for 4 bits
    x = _normal(64, 48, seed=1)
    result = quantize(x, scheme, (16,))
    groups = _groups(x, 16)  # [4, 16, 48]
    torch.testing.assert_close(result.scales, groups.abs().amax(dim=1) / largest, rtol=1e-6, atol=0)
    centred = _groups(_unpack_by_bytes(result.q, bits) - bias, 16).float()
    # each group's largest |x| of each output channel lands on +-largest
    assert torch.equal(centred.abs().amax(dim=1), torch.full((4, 48), float(largest)))
    error = (centred * result.scales[:, None, :] - groups).abs()
    assert (error <= result.scales[:, None, :] / 2 * (1 + 1e-5)).all()


@pytest.mark.parametrize("scheme", ["wna16_w4_zp", "wna16_w8_zp"])
def test_wna16_asymmetric_maps_each_groups_range_onto_the_unsigned_range(scheme):
    bits, _ = WNA16[scheme]
    top = 2**bits - 1
    x = _normal(64, 32, seed=2) + 0.7  # off-centre, most groups of one sign at 4 bits
    x[:32, :8] = x[:32, :8].abs() + 0.1  # groups wholly above 0: their range widens to 0
    result = quantize(x, scheme, (32,))
    groups = _groups(x, 32)  # [2, 32, 32]
    lo = groups.amin(dim=1).clamp(max=0.0)
    hi = groups.amax(dim=1).clamp(min=0.0)
    torch.testing.assert_close(result.scales, (hi - lo) / top, rtol=1e-6, atol=0)
    zeros = _unpack_by_bytes(result.zeros, bits)
    assert torch.equal(zeros, torch.round(-lo / result.scales).to(torch.int32))
    assert torch.equal(zeros[0, :8], torch.zeros(8, dtype=torch.int32))  # min widened to 0
    q = _groups(_unpack_by_bytes(result.q, bits), 32)
    assert torch.equal(q.amax(dim=1)[:, 8:], torch.full((2, 24), top, dtype=torch.int32))
    dequantised = (q - zeros[:, None, :]).float() * result.scales[:, None, :]
    assert ((dequantised - groups).abs() <= result.scales[:, None, :] / 2 * (1 + 1e-4)).all()


@pytest.mark.parametrize(
    "scheme, shape, group, message",
    [
        ("wna16_w4", (64, 32), (24,), "group is [24] for K = 64, expected [G] with G dividing K"),
        (
            "wna16_w4_zp",
            (64, 36),
            (32,),
            "x has shape [64, 36], expected [K, N] with N a multiple of 8",
        ),
        (
            "wna16_w8",
            (64, 34),
            (32,),
            "x has shape [64, 34], expected [K, N] with N a multiple of 4",
        ),
        ("wna16_w8_zp", (64, 32), (1, 32), "group is [1, 32], expected [G]"),
    ],
    ids=["group-not-dividing-k", "n-not-whole-words-4", "n-not-whole-words-8", "2-d-group"],
)
def test_wna16_refuses_what_it_cannot_pack(scheme, shape, group, message):
    with pytest.raises(ValueError, match=re.escape(f"scheme '{scheme}': {message}")):
        quantize(_normal(*shape), scheme, group)


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_every_scheme_is_deterministic(scheme):
    rules = QUANT_SCHEMES[scheme]
    x = _normal(4, 3, 64) if rules.ranks in ((), (2, 3)) else _normal(32, 64)
    group = None if rules.group is None else tuple(d or 16 for d in rules.group)
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

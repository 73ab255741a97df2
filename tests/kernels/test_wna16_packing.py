"""The canonical packed layout of weight-only weights (``vllm_fl.kernels.wna16``), against
vLLM's own packer (``quant_utils.pack_quantized_values_into_int32``, the GPTQ order) and against
values written bit by bit."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from vllm_fl.kernels import wna16  # noqa: E402


@pytest.mark.parametrize("bits", [4, 8])
def test_values_sit_in_sequential_fields_of_each_word(bits):
    factor = 32 // bits
    values = torch.arange(factor, dtype=torch.int32).reshape(1, factor) + 1
    word = int(wna16.pack(values, bits, dim=1).item()) & 0xFFFFFFFF
    expected = sum((j + 1) << (bits * j) for j in range(factor))
    assert word == expected
    assert torch.equal(wna16.unpack(wna16.pack(values, bits, dim=1), bits, dim=1), values)


@pytest.mark.parametrize("bits", [4, 8])
def test_top_values_survive_the_sign_bit(bits):
    top = (1 << bits) - 1
    values = torch.full((3, 32 // bits * 2), top, dtype=torch.int32)
    packed = wna16.pack(values, bits, dim=1)
    assert packed.dtype == torch.int32 and int(packed[0, 0]) == -1
    assert torch.equal(wna16.unpack(packed, bits, dim=1), values)


@pytest.mark.parametrize("bits", [4, 8])
def test_layouts_agree_with_vllms_packer(bits):
    quant_utils = pytest.importorskip("vllm.model_executor.layers.quantization.utils.quant_utils")
    from vllm.scalar_type import scalar_types

    wtype = scalar_types.uint4b8 if bits == 4 else scalar_types.uint8b128
    torch.manual_seed(0)
    values = torch.randint(0, 1 << bits, (64, 48), dtype=torch.int32)
    canonical = quant_utils.pack_quantized_values_into_int32(values, wtype, packed_dim=1)
    k_packed = quant_utils.pack_quantized_values_into_int32(values, wtype, packed_dim=0)
    assert torch.equal(wna16.pack(values, bits, dim=1), canonical)
    assert torch.equal(wna16.k_packed_to_canonical(k_packed, bits), canonical)
    assert torch.equal(wna16.canonical_to_k_packed(canonical, bits), k_packed)


def test_a_width_that_does_not_pack_is_refused():
    with pytest.raises(ValueError, match="cannot pack 6 values of 4 bits along dimension 1"):
        wna16.pack(torch.zeros(2, 6, dtype=torch.int32), 4, dim=1)
    with pytest.raises(ValueError, match=r"bits is 3, expected one of \[4, 8\]"):
        wna16.pack_factor(3)


@pytest.mark.parametrize("zero_points", [False, True])
@pytest.mark.parametrize("bits, group", [(4, 32), (4, -1), (8, 64)])
def test_quantize_then_dequantize_is_within_half_a_step(bits, group, zero_points):
    torch.manual_seed(1)
    weight = torch.randn(128, 64)
    qweight, scales, qzeros = wna16.quantize(weight, bits, group, zero_points)
    assert qweight.shape == (128, 64 * bits // 32)
    assert (qzeros is not None) == zero_points
    step = scales.repeat_interleave(128 if group == -1 else group, dim=0)
    error = (wna16.dequantize(qweight, scales, bits, group, qzeros) - weight).abs()
    assert bool((error <= step * 0.5 + 1e-6).all())

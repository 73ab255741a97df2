"""The CUDA and flagos ``wna16_gemm`` on a GPU with vLLM's CUDA build, against the reference:
each kernel the cuda impl can take (Machete where the GPU is Hopper, Marlin forced by presenting
the GPU as Ampere, the dequantised matmul), 4 and 8 bits, with and without zero points, every
group size, decode and prefill row counts, Llama-8B widths; and each weight repacked once over
several calls. The generated parity tests cover the manifest's cases.

Marked ``gpu``: skipped without an NVIDIA GPU or vLLM; `make test-gpu` runs it.
"""

from __future__ import annotations

import pytest
import torch

from vllm_fl.backends.flaggems.impl import wna16 as flagos
from vllm_fl.backends.reference.impl import wna16 as reference
from vllm_fl.backends.cuda.impl import wna16 as cuda
from vllm_fl.kernels import wna16 as packing

pytestmark = pytest.mark.gpu("vllm")

DEVICE = "cuda"
#: bits, zero points, group size
FORMATS = [
    (4, False, 128),  # GPTQ
    (4, False, 32),
    (4, True, 128),  # AWQ
    (4, True, -1),
    (8, False, 128),
    (8, False, -1),
    (8, True, 64),
]
SHAPES = [(1, 4096, 6144), (33, 4096, 4096), (256, 14336, 4096)]  # M, K, N


def _weights(bits, zero_points, group, k, n, dtype):
    generator = torch.Generator().manual_seed(k + n + bits)
    weight = torch.randn(k, n, generator=generator) * 0.02
    qweight, scales, qzeros = packing.quantize(weight, bits, group, zero_points)
    return (
        qweight.to(DEVICE),
        scales.to(dtype).to(DEVICE),
        None if qzeros is None else qzeros.to(DEVICE),
    )


def _close(out, expected):
    # the kernels round the dequantised weight (and Machete the pre-scaled zeros) to x's dtype
    scale = expected.float().abs().amax().clamp(min=1.0)
    assert float((out.float() - expected.float()).abs().amax() / scale) < 2e-2


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f"w{f[0]}{'zp' if f[1] else ''}g{f[2]}")
@pytest.mark.parametrize("capability", ["native", "ampere"])
def test_cuda_impl_matches_the_reference(monkeypatch, fmt, shape, dtype, capability):
    bits, zero_points, group = fmt
    m, k, n = shape
    if capability == "ampere":  # Marlin, as vLLM takes it below Hopper (Marlin runs on sm_90)
        monkeypatch.setattr(cuda, "_capability", lambda index: (8, 0))
    qweight, scales, qzeros = _weights(bits, zero_points, group, k, n, dtype)
    x = torch.randn(m, k, dtype=dtype, device=DEVICE)
    bias = torch.randn(n, dtype=dtype, device=DEVICE) * 0.1
    out = cuda.wna16_gemm(x, qweight, scales, bits, group, qzeros, bias)
    expected = reference.wna16_gemm(x, qweight, scales, bits, group, qzeros, bias)
    assert out.shape == (m, n) and out.dtype == dtype
    _close(out, expected)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f"w{f[0]}{'zp' if f[1] else ''}g{f[2]}")
def test_flagos_impl_matches_the_reference(fmt, shape, dtype):
    pytest.importorskip("triton")
    bits, zero_points, group = fmt
    m, k, n = shape
    qweight, scales, qzeros = _weights(bits, zero_points, group, k, n, dtype)
    x = torch.randn(m, k, dtype=dtype, device=DEVICE)
    out = flagos.wna16_gemm(x, qweight, scales, bits, group, qzeros)
    _close(out, reference.wna16_gemm(x, qweight, scales, bits, group, qzeros))


@pytest.mark.parametrize("capability", ["native", "ampere"])
def test_each_weight_is_repacked_once(monkeypatch, capability):
    from vllm import _custom_ops as ops

    if capability == "ampere":
        monkeypatch.setattr(cuda, "_capability", lambda index: (8, 0))
    calls = []
    for name in ("gptq_marlin_repack", "machete_prepack_B"):
        real = getattr(ops, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(ops, name, counted)
    qweight, scales, qzeros = _weights(4, False, 128, 4096, 4096, torch.bfloat16)
    for m in (1, 16, 1, 300):
        x = torch.randn(m, 4096, dtype=torch.bfloat16, device=DEVICE)
        cuda.wna16_gemm(x, qweight, scales, 4, 128, qzeros)
    assert len(calls) == 1, calls


@pytest.mark.parametrize("capability", ["native", "ampere"])
def test_a_layers_weight_is_held_once_on_the_gpu(monkeypatch, capability):
    if capability == "ampere":
        monkeypatch.setattr(cuda, "_capability", lambda index: (8, 0))
    qweight, scales, _ = _weights(4, False, 128, 4096, 14336, torch.bfloat16)
    weight = torch.nn.Parameter(qweight, requires_grad=False)
    x = torch.randn(16, 4096, dtype=torch.bfloat16, device=DEVICE)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    out = cuda.wna16_gemm(x, weight, scales, 4, 128)
    torch.cuda.synchronize()
    # the repacked copy (the canonical's size) replaced the canonical; the output remains
    grown = torch.cuda.memory_allocated() - before
    assert grown <= out.numel() * out.element_size() + (4 << 20), grown  # weight: 28 MiB
    expected = reference.wna16_gemm(x, weight, scales, 4, 128)  # reads the weight back
    _close(out, expected)
    _close(cuda.wna16_gemm(x, weight, scales, 4, 128), expected)


@pytest.mark.parametrize("capability", ["native", "ampere"])
def test_a_released_weight_reloaded_in_place_is_repacked_from_its_new_values(
    monkeypatch, capability
):
    from vllm_fl.reload import reloading

    if capability == "ampere":
        monkeypatch.setattr(cuda, "_capability", lambda index: (8, 0))
    layer = torch.nn.Module()
    qweight, scales, _ = _weights(4, False, 128, 4096, 4096, torch.bfloat16)
    layer.qweight = torch.nn.Parameter(qweight, requires_grad=False)
    layer.scales = torch.nn.Parameter(scales, requires_grad=False)
    x = torch.randn(8, 4096, dtype=torch.bfloat16, device=DEVICE)
    cuda.wna16_gemm(x, layer.qweight, layer.scales, 4, 128)  # repacked, the canonical released
    generator = torch.Generator().manual_seed(7)
    other = packing.quantize(torch.randn(4096, 4096, generator=generator) * 0.02, 4, 128)
    new_qweight, new_scales = other[0].to(DEVICE), other[1].to(torch.bfloat16).to(DEVICE)
    with reloading(layer):  # as vLLM's reload_weights writes: through .data, in place
        layer.qweight.data.copy_(new_qweight)
        layer.scales.data.copy_(new_scales)
    out = cuda.wna16_gemm(x, layer.qweight, layer.scales, 4, 128)
    _close(out, reference.wna16_gemm(x, new_qweight, new_scales, 4, 128))

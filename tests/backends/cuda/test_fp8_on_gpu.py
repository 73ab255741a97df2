"""The FP8 linear chain on a GPU, as the plugin's kernels call it: activations quantised by one
backend's quantiser (block path: column-major, TMA-aligned scales, what the kernel asks for on
CUDA) and multiplied by a backend's GEMM, against the reference chain on the same inputs. Beyond
the generated parity tests it covers the scale layouts the quantisers hand over (also from one
backend to another), DeepGEMM's weight scales converted once per scale tensor and again after an
in-place change, CUTLASS's block path (float16 output, which DeepGEMM does not take) and bias.

Marked ``gpu``: skipped without an NVIDIA GPU and vLLM's CUDA build (flagos also needs flag_gems).
"""

from __future__ import annotations

import pytest
import torch

from vllm_fl.backends.reference.impl import quant as ref
from vllm_fl.testing.quantize import fp8_block

pytestmark = pytest.mark.gpu("vllm")

DEVICE = "cuda"
#: (tokens, N, K): decode, a few tokens, prefill; Llama-3-8B's o_proj shape last
SHAPES = [(1, 512, 1024), (7, 384, 512), (300, 4096, 4096)]
TOLERANCE = {"atol": 5e-2, "rtol": 2e-2}


def _backend(name: str):
    if name == "flagos":
        pytest.importorskip("flag_gems")
        from vllm_fl.backends.flaggems.impl import quant
    else:
        from vllm_fl.backends.cuda.impl import quant
    return quant


def _block_weight(n: int, k: int):
    torch.manual_seed(n + k)
    blocks = fp8_block(torch.randn(n, k) * 0.05, (128, 128))
    return blocks.q.to(DEVICE), blocks.scales.to(DEVICE)


def _assert_close(got: torch.Tensor, expected: torch.Tensor) -> None:
    assert got.shape == expected.shape and got.dtype == expected.dtype
    scale = expected.float().abs().max().clamp(min=1.0)
    torch.testing.assert_close(got.float() / scale, expected.float() / scale, **TOLERANCE)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize(
    "quantiser, gemm",
    [("cuda", "cuda"), ("flagos", "flagos"), ("cuda", "flagos"), ("flagos", "cuda")],
)
def test_block_chain_matches_the_reference(quantiser, gemm, shape):
    m, n, k = shape
    w_q, w_s = _block_weight(n, k)
    x = torch.randn(m, k, device=DEVICE, dtype=torch.bfloat16)
    q, s = _backend(quantiser).per_token_group_quant_fp8(x, 128, 1e-10, True, True, False)
    assert s.shape == (m, k // 128) and s.stride(0) == 1  # column-major, as asked
    got = _backend(gemm).w8a8_block_fp8_matmul(q, w_q, s, w_s, 128, 128, "bfloat16")
    ref_q, ref_s = ref.per_token_group_quant_fp8(x, 128)
    expected = ref.w8a8_block_fp8_matmul(ref_q, w_q, ref_s, w_s, 128, 128, "bfloat16")
    _assert_close(got, expected)


def test_cutlass_block_path_for_float16_output():
    """DeepGEMM takes bfloat16 output only: float16 goes to CUTLASS's block-scaled GEMM."""
    cuda = _backend("cuda")
    w_q, w_s = _block_weight(512, 1024)
    x = torch.randn(33, 1024, device=DEVICE, dtype=torch.float16)
    q, s = cuda.per_token_group_quant_fp8(x, 128)
    got = cuda.w8a8_block_fp8_matmul(q, w_q, s, w_s, 128, 128, "float16")
    _assert_close(got, ref.w8a8_block_fp8_matmul(q, w_q, s, w_s, 128, 128, "float16"))


def test_deep_gemm_weight_scales_follow_an_in_place_change():
    """The DeepGEMM layout of a weight's scales is made once per scale tensor and remade when
    the tensor changes in place (a reloaded weight)."""
    cuda = _backend("cuda")
    w_q, w_s = _block_weight(512, 1024)
    x = torch.randn(64, 1024, device=DEVICE, dtype=torch.bfloat16)
    q, s = cuda.per_token_group_quant_fp8(x, 128, 1e-10, True, True, False)
    first = cuda.w8a8_block_fp8_matmul(q, w_q, s, w_s, 128, 128, "bfloat16")
    again = cuda.w8a8_block_fp8_matmul(q, w_q, s, w_s, 128, 128, "bfloat16")
    assert torch.equal(first, again)
    w_s.mul_(2.0)
    doubled = cuda.w8a8_block_fp8_matmul(q, w_q, s, w_s, 128, 128, "bfloat16")
    _assert_close(doubled, (first.float() * 2).to(torch.bfloat16))


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("per_token", [False, True], ids=["per-tensor", "per-token"])
@pytest.mark.parametrize("channelwise", [False, True], ids=["tensor-weight", "channel-weight"])
@pytest.mark.parametrize("backend", ["cuda", "flagos"])
def test_scaled_mm_chain_matches_the_reference(backend, channelwise, per_token, out_dtype):
    """scaled_fp8_quant (its cuda impl; flagos has none and runs the reference) then
    fp8_scaled_mm on the transposed weight, with bias."""
    dtype = getattr(torch, out_dtype)
    torch.manual_seed(3)
    n, k, m = 384, 512, 37
    weight = torch.randn(n, k, device=DEVICE) * 0.05
    w_s = (weight.abs().amax(dim=1, keepdim=True) if channelwise else weight.abs().amax()) / 448
    w_q = (weight / w_s).to(torch.float8_e4m3fn).t()  # [K, N], column-major, as vLLM keeps it
    w_s = w_s.reshape(-1, 1) if channelwise else w_s.reshape(1)
    x = torch.randn(m, k, device=DEVICE, dtype=dtype)
    bias = torch.randn(n, device=DEVICE, dtype=dtype)
    quantiser = _backend("cuda") if backend == "cuda" else ref
    q, s = quantiser.scaled_fp8_quant(x, None, per_token, None)
    got = _backend(backend).fp8_scaled_mm(q, w_q, s, w_s, out_dtype, bias)
    ref_q, ref_s = ref.scaled_fp8_quant(x, None, per_token, None)
    _assert_close(got, ref.fp8_scaled_mm(ref_q, w_q, ref_s, w_s, out_dtype, bias))

"""The CUDA ``wna16_gemm`` without a GPU: which kernel it takes for a layer (vLLM's CUDA row:
Machete on Hopper, else Marlin, else a dequantised matmul), and that it repacks each weight once
(vLLM's repack and GEMM functions replaced by recorders that compute the reference's result).
The kernels' numerics are the GPU parity tests' business."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("vllm")

from vllm_fl.backends.reference.impl import wna16 as reference  # noqa: E402
from vllm_fl.backends.cuda.impl import wna16 as cuda  # noqa: E402
from vllm_fl.kernels import wna16 as packing  # noqa: E402

H100, A100, T4 = (9, 0), (8, 0), (7, 5)
BF16 = torch.bfloat16


@pytest.mark.parametrize(
    "args, capability, kernel",
    [
        ((4, False, 128, 4096, 4096, BF16), H100, cuda.MACHETE),  # GPTQ W4A16, Llama shapes
        ((8, False, -1, 4096, 14336, BF16), H100, cuda.MACHETE),
        ((4, True, 64, 4096, 4096, torch.float16), H100, cuda.MACHETE),  # AWQ
        ((8, True, 128, 4096, 4096, BF16), H100, cuda.MACHETE),
        ((4, False, 32, 4096, 4096, BF16), H100, cuda.MARLIN),  # Machete has no groups of 32
        ((4, False, 128, 4096, 4160, BF16), H100, cuda.MARLIN),  # N % 128 != 0, N % 64 == 0
        ((4, False, 128, 4096, 4096, BF16), A100, cuda.MARLIN),
        ((4, True, 128, 4096, 4096, BF16), T4, cuda.MARLIN),
        ((8, True, 128, 4096, 4096, BF16), A100, cuda.DEQUANTISED),  # Marlin: no 8-bit zeros
        ((4, False, 128, 4096, 4096, torch.float32), H100, cuda.DEQUANTISED),
        ((4, False, 128, 4096, 96, BF16), H100, cuda.DEQUANTISED),  # off Marlin's tiles
        ((4, False, 128, 4096, 4096, BF16), (7, 0), cuda.DEQUANTISED),
    ],
)
def test_the_kernel_is_the_one_vllms_cuda_row_takes(args, capability, kernel):
    assert cuda.choose_kernel(*args, capability=capability) == kernel


class _Recorder:
    """Counts calls; answers with ``result(**kwargs)``."""

    def __init__(self, result):
        self.calls: list[dict] = []
        self.positional: list[tuple] = []
        self.result = result

    def __call__(self, *args, **kwargs):
        self.calls.append(kwargs)
        self.positional.append(args)
        return self.result(*args, **kwargs)


@pytest.fixture
def marlin(monkeypatch):
    """Marlin's functions as recorders: the repack keeps GPTQ's layout, the scale and zero-point
    permutations are identities, the GEMM computes the reference from GPTQ's layout."""
    from vllm import _custom_ops as ops
    from vllm.model_executor.layers.quantization.utils import marlin_utils

    def gemm(**kw):
        bits = kw["wtype"].size_bits
        canonical = packing.k_packed_to_canonical(kw["weight"], bits)
        zeros = kw["weight_zp"] if kw["weight_zp"].numel() else None
        k = kw["input_size_per_partition"]
        group = k // kw["weight_scale"].shape[0]
        return reference.wna16_gemm(
            kw["input"], canonical, kw["weight_scale"], bits, group, zeros, kw["bias"]
        )

    recorders = {
        "repack": _Recorder(lambda **kw: kw["b_q_weight"]),
        "scales": _Recorder(lambda s, **kw: s),
        "zeros": _Recorder(lambda zp, **kw: packing.pack(zp, kw["num_bits"], dim=1)),
        "bias": _Recorder(lambda b: b),
        "gemm": _Recorder(lambda **kw: gemm(**kw)),
    }
    monkeypatch.setattr(ops, "gptq_marlin_repack", recorders["repack"], raising=False)
    monkeypatch.setattr(marlin_utils, "marlin_permute_scales", recorders["scales"])
    monkeypatch.setattr(marlin_utils, "marlin_zero_points", recorders["zeros"])
    monkeypatch.setattr(marlin_utils, "marlin_permute_bias", recorders["bias"])
    monkeypatch.setattr(marlin_utils, "apply_gptq_marlin_linear", recorders["gemm"])
    monkeypatch.setattr(cuda, "_workspace", lambda device: torch.zeros(1, dtype=torch.int32))
    monkeypatch.setattr(cuda, "_capability", lambda index: A100)
    return recorders


@pytest.mark.parametrize("zero_points", [False, True])
def test_marlin_repacks_each_weight_once_and_computes_the_op(marlin, zero_points):
    k, n, group = 256, 128, 64
    qweight, scales, qzeros = packing.quantize(torch.randn(k, n), 4, group, zero_points)
    scales = scales.to(BF16)
    bias = torch.randn(n, dtype=BF16)
    for m in (1, 7, 1):
        x = torch.randn(m, k, dtype=BF16)
        out = cuda.wna16_gemm(x, qweight, scales, 4, group, qzeros, bias)
        expected = reference.wna16_gemm(x, qweight, scales, 4, group, qzeros, bias)
        torch.testing.assert_close(out, expected)
    assert len(marlin["gemm"].calls) == 3
    assert len(marlin["repack"].calls) == len(marlin["scales"].calls) == 1
    assert len(marlin["zeros"].calls) == (1 if zero_points else 0)
    assert len(marlin["bias"].calls) == 1
    repack = marlin["repack"].calls[0]
    # Marlin's repack starts from GPTQ's layout, packed along K
    assert torch.equal(repack["b_q_weight"], packing.canonical_to_k_packed(qweight, 4))
    assert (repack["size_k"], repack["size_n"], repack["num_bits"]) == (k, n, 4)
    gemm = marlin["gemm"].calls[0]
    assert (gemm["input_size_per_partition"], gemm["output_size_per_partition"]) == (k, n)
    assert str(gemm["wtype"]) == ("uint4" if zero_points else "uint4b8")


def test_a_changed_weight_is_repacked_again(marlin):
    k, n = 128, 128
    qweight, scales, _ = packing.quantize(torch.randn(k, n), 8, 128)
    x = torch.randn(3, k)
    cuda.wna16_gemm(x.to(BF16), qweight, scales.to(BF16), 8, -1)
    qweight.add_(1)  # in place: its version moves
    out = cuda.wna16_gemm(x.to(BF16), qweight, scales.to(BF16), 8, -1)
    assert len(marlin["repack"].calls) == 2
    torch.testing.assert_close(
        out, reference.wna16_gemm(x.to(BF16), qweight, scales.to(BF16), 8, -1)
    )


def test_machete_prepacks_once_and_takes_scaled_zero_points(monkeypatch):
    from vllm import _custom_ops as ops

    k, n, group = 256, 128, 128
    qweight, scales, qzeros = packing.quantize(torch.randn(k, n), 4, group, True)
    scales = scales.to(torch.float16)

    def mm(**kw):
        # Machete computes x @ (q * s + zeros), zeros = -zero * s per group
        canonical = packing.k_packed_to_canonical(kw["b_q"], 4)
        q = packing.unpack(canonical, 4, dim=1).float()
        reps = k // kw["b_group_scales"].shape[0]
        s = kw["b_group_scales"].float().repeat_interleave(reps, dim=0)
        z = kw["b_group_zeros"].float().repeat_interleave(reps, dim=0)
        return (kw["a"].float() @ (q * s + z)).to(kw["a"].dtype)

    prepack = _Recorder(lambda w, **kw: w.contiguous())
    machete = _Recorder(lambda **kw: mm(**kw))
    monkeypatch.setattr(ops, "machete_prepack_B", prepack, raising=False)
    monkeypatch.setattr(ops, "machete_mm", machete, raising=False)
    monkeypatch.setattr(cuda, "_capability", lambda index: H100)
    for m in (2, 9):
        x = torch.randn(m, k, dtype=torch.float16)
        out = cuda.wna16_gemm(x, qweight, scales, 4, group, qzeros)
        expected = reference.wna16_gemm(x, qweight, scales, 4, group, qzeros)
        # the pre-scaled zero points are rounded to float16
        torch.testing.assert_close(out, expected, atol=5e-2, rtol=1e-2)
    assert len(prepack.calls) == 1 and len(machete.calls) == 2
    assert prepack.calls[0]["a_type"] == torch.float16
    assert str(prepack.calls[0]["b_type"]) == "uint4"
    assert machete.calls[0]["b_group_size"] == group


@pytest.mark.parametrize("fallback", ["reference", "flagos"])
def test_a_layers_weight_is_held_once_and_other_backends_still_read_it(marlin, fallback):
    from vllm_fl.backends.flaggems.impl import wna16 as flagos
    from vllm_fl.kernels import resident

    # 8 bits: the flagos impl dequantises them in PyTorch, which runs here
    k, n, group, bits = 256, 128, 64, 8
    qweight, scales, _ = packing.quantize(torch.randn(k, n), bits, group)
    canonical = qweight.clone()
    weight = torch.nn.Parameter(qweight, requires_grad=False)  # as the linear method holds it
    scales = scales.to(BF16)
    x = torch.randn(5, k, dtype=BF16)
    out = cuda.wna16_gemm(x, weight, scales, bits, group)
    # Marlin's copy replaces the canonical weight, as in vanilla vLLM
    assert resident.is_released(weight) and weight.untyped_storage().nbytes() == 0
    assert torch.equal(cuda.wna16_gemm(x, weight, scales, bits, group), out)
    # a fallback reads the canonical values back; the repacked copy stays valid
    other = {"reference": reference, "flagos": flagos}[fallback]
    read = other.wna16_gemm(x, weight, scales, bits, group)
    assert torch.equal(weight, canonical)
    # bf16 rounding of results of magnitude ~16; a read of freed storage would be garbage
    torch.testing.assert_close(read, out, atol=0.5, rtol=2e-2)
    assert torch.equal(cuda.wna16_gemm(x, weight, scales, bits, group), out)
    assert len(marlin["repack"].calls) == 1


def test_a_released_weight_is_read_back_before_another_layout_is_made(monkeypatch):
    from vllm import _custom_ops as ops

    k, n, group = 256, 128, 128
    qweight, scales, _ = packing.quantize(torch.randn(k, n), 4, group)
    k_packed = packing.canonical_to_k_packed(qweight, 4)
    weight = torch.nn.Parameter(qweight, requires_grad=False)
    prepack = _Recorder(lambda w, **kw: w.contiguous())
    monkeypatch.setattr(ops, "machete_prepack_B", prepack, raising=False)
    monkeypatch.setattr(
        ops, "machete_mm", lambda **kw: kw["a"].new_zeros(kw["a"].shape[0], n), raising=False
    )
    monkeypatch.setattr(cuda, "_capability", lambda index: H100)
    # one prepacked copy per activation type: the second is made from the released canonical
    for dtype in (torch.float16, BF16):
        cuda.wna16_gemm(torch.randn(2, k, dtype=dtype), weight, scales.to(dtype), 4, group)
    assert [call["a_type"] for call in prepack.calls] == [torch.float16, BF16]
    # the weight reaches the prepack in GPTQ's layout both times, not read from freed storage
    assert all(torch.equal(args[0], k_packed) for args in prepack.positional)

"""The reference ``fused_experts_quant`` reads the weight-only layouts as vLLM's Triton kernel does.

vLLM's ``fused_moe_kernel_gptq_awq`` (the GEMM of its Triton experts for INT4 / INT8 weights with
group scales and zero points, which FlagGems ported unchanged) runs here in Triton's interpreter
on CPU tensors, in the sequence of vLLM's ``fused_experts_impl``: the alignment (the reference's),
the first GEMM, ``silu(gate) * up``, the second GEMM weighted by the routing weights, the top-k
sum. The reference op must compute the same from the same packed weights, scales and zero
points: nibble order, zero-point packing along N and the fixed offsets (8, 128) are the kernel's.
"""

from __future__ import annotations

import importlib.util
import inspect
import textwrap

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
vllm_fused_moe = pytest.importorskip("vllm.model_executor.layers.fused_moe.fused_moe")

from tests.support import moe_quant  # noqa: E402
from triton_helpers import interpret  # noqa: E402
from vllm_fl.backends.reference.impl.moe import moe_align_block_size  # noqa: E402
from vllm_fl.backends.reference.impl.moe_quant import fused_experts_quant  # noqa: E402

BLOCK_M, BLOCK_N, BLOCK_K = 16, 32, 64


@pytest.fixture(scope="module")
def gptq_awq_kernel(tmp_path_factory):
    """vLLM's kernel compiled by the real Triton: vLLM's CPU build swaps Triton for a
    placeholder (no CPU backend), so its source is loaded again under ``triton.jit``, with the
    helper it calls."""
    sources = []
    for name in ("write_zeros_to_output", "fused_moe_kernel_gptq_awq"):
        fn = getattr(vllm_fused_moe, name)
        source = textwrap.dedent(inspect.getsource(getattr(fn, "fn", fn)))
        sources.append("@triton.jit\n" + source[source.index("def ") :])
    path = tmp_path_factory.mktemp("vllm-kernels") / "gptq_awq_kernel.py"
    path.write_text("import triton\nimport triton.language as tl\n\n\n" + "\n\n".join(sources))
    spec = importlib.util.spec_from_file_location("gptq_awq_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.fused_moe_kernel_gptq_awq


def _gemm(kernel, a, b, c, scale, zp, routing, mul_weight, top_k, int4, group):
    import triton.language as tl

    weights, sorted_ids, expert_ids, total = routing
    em = sorted_ids.numel()
    n, k = b.size(1), a.size(1)
    grid = (-(-em // BLOCK_M) * -(-n // BLOCK_N),)
    args = (
        a, b, c, scale, zp, weights, sorted_ids, expert_ids, total, n, k, em,
        a.size(0) * top_k, a.stride(0), a.stride(1), b.stride(0), b.stride(2), b.stride(1),
        c.stride(1), c.stride(2), scale.stride(0), scale.stride(2), scale.stride(1),
        zp.stride(0) if zp is not None else 0, zp.stride(2) if zp is not None else 0,
        zp.stride(1) if zp is not None else 0,
    )  # fmt: skip
    kwargs = dict(
        block_k_diviable=k % BLOCK_K == 0, group_size=group, BLOCK_SIZE_M=BLOCK_M,
        BLOCK_SIZE_N=BLOCK_N, BLOCK_SIZE_K=BLOCK_K, GROUP_SIZE_M=1, SPLIT_K=1,
        MUL_ROUTED_WEIGHT=mul_weight, top_k=top_k, compute_type=tl.float32,
        has_zp=zp is not None, use_int4_w4a16=int4, use_int8_w8a16=not int4,
    )  # fmt: skip
    interpret(kernel, grid, args, kwargs)


def _vllm_sequence(kernel, x, q1, q2, weights, ids, int4, group, experts):
    """vLLM's ``fused_experts_impl`` for weight-only experts, its GEMMs interpreted."""
    tokens, top_k = ids.shape
    pairs = ids.numel()
    padded = pairs + experts * (BLOCK_M - 1)
    sorted_ids = torch.empty(padded, dtype=torch.int32)
    expert_ids = torch.empty(-(-padded // BLOCK_M), dtype=torch.int32)
    total = torch.empty(1, dtype=torch.int32)
    moe_align_block_size(ids, experts, BLOCK_M, sorted_ids, expert_ids, total)
    routing = (weights, sorted_ids, expert_ids, total)
    n = q1.weight.size(1)
    gate_up = torch.zeros(tokens, top_k, n)
    _gemm(
        kernel, x, q1.weight, gate_up, q1.scale, q1.zero_point, routing, False, top_k, int4, group
    )
    flat = gate_up.view(-1, n)
    activated = torch.nn.functional.silu(flat[:, : n // 2]) * flat[:, n // 2 :]
    per_slot = torch.zeros(tokens, top_k, q2.weight.size(1))
    _gemm(kernel, activated, q2.weight, per_slot, q2.scale, q2.zero_point, routing, True, 1, int4, group)  # fmt: skip
    return per_slot.sum(dim=1)


@pytest.mark.parametrize("zero_points", [False, True], ids=["sym", "zp"])
@pytest.mark.parametrize("quant_type, bits", [("int4_w4a16", 4), ("int8_w8a16", 8)])
def test_the_reference_computes_what_vllms_kernel_computes(
    gptq_awq_kernel, quant_type, bits, zero_points
):
    experts, hidden, inter, tokens, top_k, group = 4, 128, 64, 5, 2, 32
    gen = torch.Generator().manual_seed(bits + zero_points)
    x = torch.randn(tokens, hidden, generator=gen)
    q1 = moe_quant.groups(
        torch.randn(experts, 2 * inter, hidden, generator=gen) * 0.1, group, bits, zero_points
    )
    q2 = moe_quant.groups(
        torch.randn(experts, hidden, inter, generator=gen) * 0.1, group, bits, zero_points
    )
    weights, ids = moe_quant.routing(tokens, experts, top_k, gen)
    expected = _vllm_sequence(gptq_awq_kernel, x, q1, q2, weights, ids, bits == 4, group, experts)
    out = fused_experts_quant(
        x, q1.weight, q2.weight, weights, ids, quant_type, q1.scale, q2.scale,
        w1_zp=q1.zero_point, w2_zp=q2.zero_point, block_k=group,
    )  # fmt: skip
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)

"""The kernel library's add-and-normalise and rows kernels (``norm_kernels``) against the
reference impl in Triton's interpreter on the CPU, and compiled for an H100 (sm_90) by Triton's
compiler.
"""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from triton_helpers import compile_for_h100, interpret, needs_nvidia_compiler  # noqa: E402
from vllm_fl.kernels import norm_kernels  # noqa: E402
from vllm_fl.backends.reference.impl import normalization as ref_norm  # noqa: E402


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("hidden", [64, 100, 4096])
def test_matches_the_reference(dtype, hidden):
    gen = torch.Generator().manual_seed(2)
    # x as vLLM may hand it over: rows of a wider buffer
    wide = torch.randn(6, hidden + 8, generator=gen).to(dtype)
    x = wide[:, :hidden]
    residual = torch.randn(6, hidden, generator=gen).to(dtype)
    weight = (torch.randn(hidden, generator=gen) * 0.1 + 1.0).to(dtype)
    out = torch.full((6, hidden), float("nan"), dtype=dtype)
    total = torch.full((6, hidden), float("nan"), dtype=dtype)
    planned = norm_kernels.add_rms_norm_launch(x, residual, weight, 1e-6, out, total)
    assert planned is not None
    interpret(norm_kernels.add_rms_norm_kernel, planned.grid, planned.args, planned.kwargs)
    layer = types.SimpleNamespace(weight=weight.float(), variance_epsilon=1e-6)
    exp_out, exp_total = ref_norm.rms_norm(layer, x.float(), residual.float())
    tol = {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}
    torch.testing.assert_close(total.float(), exp_total, **tol)
    torch.testing.assert_close(out.float(), exp_out, **tol)


def test_calls_it_does_not_take():
    x = torch.randn(4, 64)
    w = torch.ones(64)
    outs = (torch.empty(4, 64), torch.empty(4, 64))
    take = norm_kernels.add_rms_norm_launch
    assert take(x, x, w, 1e-6, *outs) is not None
    assert take(x.view(2, 2, 64), x.view(2, 2, 64), w, 1e-6, *outs) is None  # not 2-D
    assert take(x, x.half(), w, 1e-6, *outs) is None
    assert take(x, x, w[:32], 1e-6, *outs) is None
    assert take(x[:0], x[:0], w, 1e-6, outs[0][:0], outs[1][:0]) is None
    wide = torch.randn(2, norm_kernels.MAX_ROW + 1)
    assert take(wide, wide, torch.ones(wide.shape[1]), 1e-6, wide, wide) is None
    strided = torch.randn(4, 128)[:, ::2]
    assert take(strided, x, w, 1e-6, *outs) is None


@needs_nvidia_compiler
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_compiles_for_an_h100(dtype):
    pointers = ("x_ptr", "residual_ptr", "out_ptr", "total_ptr")
    signature = {name: f"*{dtype}" for name in pointers}
    signature.update(weight_ptr=f"*{dtype}", n="i32", eps="fp32")
    signature.update({name: "i32" for name in ("x_row", "residual_row", "out_row", "total_row")})
    assert compile_for_h100(norm_kernels.add_rms_norm_kernel, signature, {"BLOCK_N": 4096}, 8)


def _qkv_views(tokens, heads, kv_heads, head, dtype, gen):
    """Qwen3's per-head norm inputs: [tokens, heads, head] views of a qkv projection's rows."""
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * head, generator=gen).to(dtype)
    q, k, _v = qkv.split([heads * head, kv_heads * head, kv_heads * head], dim=-1)
    return q.view(tokens, heads, head), k.view(tokens, kv_heads, head)


def _strided_inputs(case, dtype, gen):
    if case == "qkv heads":
        return _qkv_views(3, 32, 4, 128, dtype, gen)[0]
    if case == "qkv heads, 100 wide":  # neither rows nor features a power of two
        return _qkv_views(2, 5, 1, 100, dtype, gen)[1]
    if case == "2-d rows of a wider buffer":
        return torch.randn(7, 4096 + 64, generator=gen).to(dtype)[:, :4096]
    return torch.randn(1, 3, 96, generator=gen).to(dtype)[0]  # "one contiguous 2-d row block"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize(
    "case",
    ["qkv heads", "qkv heads, 100 wide", "2-d rows of a wider buffer", "one contiguous block"],
)
def test_rows_kernel_matches_the_reference(dtype, case):
    gen = torch.Generator().manual_seed(5)
    x = _strided_inputs(case, dtype, gen)
    n = x.shape[-1]
    weight = (torch.randn(n, generator=gen) * 0.1 + 1.0).to(dtype)
    out = torch.full(x.shape, float("nan"), dtype=dtype)
    planned = norm_kernels.rms_norm_rows_launch(x, weight, 1e-6, out)
    assert planned is not None
    interpret(norm_kernels.rms_norm_rows_kernel, planned.grid, planned.args, planned.kwargs)
    layer = types.SimpleNamespace(weight=weight.float(), variance_epsilon=1e-6)
    expected = ref_norm.rms_norm(layer, x.float())
    tol = {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}
    torch.testing.assert_close(out.float(), expected, **tol)


def test_rows_kernel_calls_it_does_not_take():
    x = torch.randn(4, 2, 64)
    w = torch.ones(64)
    take = norm_kernels.rms_norm_rows_launch
    assert take(x, w, 1e-6, torch.empty_like(x)) is not None
    assert take(x.view(2, 2, 2, 64), w, 1e-6, x) is None  # four dimensions
    assert take(x.double(), w, 1e-6, x) is None  # FlagGems computes float64 in float64
    assert take(x, w[:32], 1e-6, x) is None
    assert take(x[:0], w, 1e-6, x[:0]) is None
    assert take(torch.randn(4, 128)[:, ::2], w, 1e-6, x) is None  # strided features
    wide = torch.randn(2, norm_kernels.MAX_ROW + 1)
    assert take(wide, torch.ones(wide.shape[1]), 1e-6, wide) is None


def test_rows_kernel_grid_covers_every_row():
    x = torch.randn(3, 40, 128)  # 40 heads: 16 rows per program, three programs per token
    planned = norm_kernels.rms_norm_rows_launch(x, torch.ones(128), 1e-6, torch.empty_like(x))
    assert planned.grid == (3, 3) and planned.kwargs["BLOCK_ROWS"] == 16


@needs_nvidia_compiler
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_rows_kernel_compiles_for_an_h100(dtype):
    signature = {"x_ptr": f"*{dtype}", "weight_ptr": f"*{dtype}", "out_ptr": f"*{dtype}"}
    signature.update(n="i32", eps="fp32", inner="i32", x_outer="i32", x_inner="i32")
    constexprs = {"BLOCK_ROWS": 16, "BLOCK_N": 128}
    assert compile_for_h100(norm_kernels.rms_norm_rows_kernel, signature, constexprs, 4)

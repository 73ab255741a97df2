"""The flagos backend's add-and-normalise kernel (``norm_kernel.py``) against the reference
impl in Triton's interpreter on the CPU, and compiled for an H100 (sm_90) by Triton's compiler.
"""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from triton_helpers import compile_for_h100, interpret, needs_nvidia_compiler  # noqa: E402
from vllm_fl.dispatch.backends.flaggems import norm_kernel  # noqa: E402
from vllm_fl.dispatch.backends.reference.impl import normalization as ref_norm  # noqa: E402


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
    planned = norm_kernel.add_rms_norm_launch(x, residual, weight, 1e-6, out, total)
    assert planned is not None
    interpret(norm_kernel.add_rms_norm_kernel, planned.grid, planned.args, planned.kwargs)
    layer = types.SimpleNamespace(weight=weight.float(), variance_epsilon=1e-6)
    exp_out, exp_total = ref_norm.rms_norm(layer, x.float(), residual.float())
    tol = {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}
    torch.testing.assert_close(total.float(), exp_total, **tol)
    torch.testing.assert_close(out.float(), exp_out, **tol)


def test_calls_it_does_not_take():
    x = torch.randn(4, 64)
    w = torch.ones(64)
    outs = (torch.empty(4, 64), torch.empty(4, 64))
    take = norm_kernel.add_rms_norm_launch
    assert take(x, x, w, 1e-6, *outs) is not None
    assert take(x.view(2, 2, 64), x.view(2, 2, 64), w, 1e-6, *outs) is None  # not 2-D
    assert take(x, x.half(), w, 1e-6, *outs) is None
    assert take(x, x, w[:32], 1e-6, *outs) is None
    assert take(x[:0], x[:0], w, 1e-6, outs[0][:0], outs[1][:0]) is None
    wide = torch.randn(2, norm_kernel.MAX_ROW + 1)
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
    assert compile_for_h100(norm_kernel.add_rms_norm_kernel, signature, {"BLOCK_N": 4096}, 8)

"""The kernel library's SSD scan (``ssd_kernels``, the flagos impl of ``mamba_chunk_scan_combined``)
in Triton's interpreter on the CPU, against the reference impl: every test case ops.yaml declares
for the op (several sequences, initial states, a chunk boundary inside a sequence, every chunk's
state, a gate) through the flagos impl, a batch whose chunks span several tiles of the kernels
(chunks of 128 tokens, head and state sizes no power of two), and the four kernels compiled for
an H100. The GPU parity tests (tests/generated) run them for real."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from tests.support.interpreted_cases import run_cases  # noqa: E402
from triton_helpers import (  # noqa: E402
    compile_for_h100,
    interpret,
    needs_interpreter_loops,
    needs_nvidia_compiler,
)
from vllm_fl.backends.flaggems.impl import mamba as flagos  # noqa: E402
from vllm_fl.backends.reference.impl import mamba as ref  # noqa: E402
from vllm_fl.kernels import mamba  # noqa: E402
from vllm_fl.kernels import ssd_kernels as sk  # noqa: E402

OP = "mamba_chunk_scan_combined"


@pytest.fixture
def interpreted(monkeypatch):
    """The library's launches run in Triton's interpreter."""
    monkeypatch.setattr(
        mamba,
        "_run",
        lambda kernel, planned: interpret(kernel, planned.grid, planned.args, planned.kwargs),
    )


@needs_interpreter_loops
def test_every_ops_yaml_case_matches_the_reference(interpreted):
    dtypes = (torch.float32, torch.float16, torch.bfloat16)
    results = run_cases(OP, flagos.mamba_chunk_scan_combined, ref.mamba_chunk_scan_combined, dtypes)
    assert len(results) == 9
    failed = {key: text for key, text in results.items() if text != "ok"}
    assert not failed, failed


def _multi_tile_case(every_chunk: bool) -> dict:
    """Three sequences (150, 130 and 20 tokens) in chunks of up to 128: the first resumes
    mid-chunk (its first chunk ends at 100), the second fills a chunk past one row tile."""
    g = torch.Generator().manual_seed(0)
    tokens, heads, headdim, dstate, groups = 300, 4, 80, 24, 2
    chunks = 5
    return dict(
        x=torch.randn(tokens, heads, headdim, generator=g),
        dt=torch.randn(tokens, heads, generator=g) * 0.5 - 1.0,
        A=-torch.rand(heads, generator=g) - 0.1,
        B=torch.randn(tokens, groups, dstate, generator=g),
        C=torch.randn(tokens, groups, dstate, generator=g),
        chunk_size=128,
        cu_seqlens=torch.tensor([0, 150, 280, 300], dtype=torch.int32),
        cu_chunk_seqlens=torch.tensor([0, 100, 150, 278, 280, 300], dtype=torch.int32),
        last_chunk_indices=torch.tensor([1, 3, 4], dtype=torch.int32),
        seq_idx=torch.tensor([0, 0, 1, 1, 2], dtype=torch.int32),
        output=torch.zeros(tokens, heads, headdim),
        states=torch.zeros(chunks if every_chunk else 3, heads, headdim, dstate),
        dt_min=0.0,
        dt_max=float("inf"),
        D=torch.randn(heads, headdim, generator=g),
        z=torch.randn(tokens, heads, headdim, generator=g),
        dt_bias=torch.randn(heads, generator=g),
        initial_states=torch.randn(3, heads, headdim, dstate, generator=g),
        dt_softplus=True,
        return_intermediate_states=every_chunk,
    )


@needs_interpreter_loops
@pytest.mark.parametrize("every_chunk", [False, True], ids=["final", "every-chunk"])
def test_chunks_over_several_tiles_match_the_reference(interpreted, every_chunk):
    case = _multi_tile_case(every_chunk)
    want = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in case.items()}
    got = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in case.items()}
    ref.mamba_chunk_scan_combined(**want)
    flagos.mamba_chunk_scan_combined(**got)
    torch.testing.assert_close(got["output"], want["output"], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got["states"], want["states"], atol=1e-4, rtol=1e-4)
    for name in ("x", "dt", "B", "C", "initial_states"):
        assert torch.equal(got[name], case[name]), f"{name} was written"


def _signature(kernel, pointers: dict[str, str]) -> dict[str, str]:
    """A kernel's compile signature: the pointers given, every other runtime argument int64
    but the clamp bounds (float32)."""
    constexprs = {
        name for name, param in zip(kernel.arg_names, kernel.params) if param.is_constexpr
    }
    signature = {}
    for name in kernel.arg_names:
        if name in constexprs:
            continue
        if name in pointers:
            signature[name] = pointers[name]
        else:
            signature[name] = "fp32" if name in ("dt_min", "dt_max") else "i64"
    return signature


@needs_nvidia_compiler
def test_the_kernels_compile_for_an_h100():
    # Mamba2 2.7B's shapes: 80 heads of 64, state 128, chunks of 256
    bf16, f32, i32 = "*bf16", "*fp32", "*i32"
    cases = [
        (
            sk.ssd_chunk_cumsum_kernel,
            dict(dt_ptr=bf16, a_ptr=f32, bias_ptr=bf16, cu_chunk_ptr=i32, dt_out_ptr=f32,
                 dacs_ptr=f32),
            dict(BLOCK_L=256, BLOCK_H=sk.CUMSUM_HEADS, HAS_BIAS=True, SOFTPLUS=True),
        ),
        (
            sk.ssd_chunk_state_kernel,
            dict(x_ptr=bf16, b_ptr=bf16, dt_ptr=f32, dacs_ptr=f32, cu_chunk_ptr=i32,
                 states_ptr=f32),
            dict(BLOCK_L=256, BLOCK_S=64, BLOCK_P=64, BLOCK_N=128),
        ),
        (
            sk.ssd_state_passing_kernel,
            dict(states_ptr=f32, dacs_ptr=f32, last_chunk_ptr=i32, init_ptr=bf16,
                 final_ptr=bf16),
            dict(BLOCK_L=256, BLOCK=sk.PASSING_BLOCK, HAS_INIT=True, EVERY_CHUNK=False),
        ),
        (
            sk.ssd_chunk_scan_kernel,
            dict(x_ptr=bf16, z_ptr=bf16, out_ptr=bf16, b_ptr=bf16, c_ptr=bf16, d_ptr=f32,
                 dt_ptr=f32, dacs_ptr=f32, cu_chunk_ptr=i32, states_ptr=f32),
            dict(BLOCK_L=256, BLOCK_M=64, BLOCK_P=64, BLOCK_N=128, HAS_D=True, HAS_Z=True),
        ),
    ]  # fmt: skip
    for kernel, pointers, constexprs in cases:
        assert compile_for_h100(kernel, _signature(kernel, pointers), constexprs, 4)

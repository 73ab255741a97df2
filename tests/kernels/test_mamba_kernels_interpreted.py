"""The library's Mamba2 kernels (``vllm_fl.kernels.mamba_kernels``) in Triton's interpreter on
the CPU, against the reference impls: the decode and prefill convolutions and the SSM decode
step, on the arguments the Mamba2 mixer passes (2-D state indices with a padded entry, initial
states, a varlen prefill batch) and the forms the ops also take (no indices, a gate, several
tokens per sequence)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from triton_helpers import interpret, needs_interpreter_loops  # noqa: E402
from vllm_fl.backends.reference.impl import mamba as ref  # noqa: E402
from vllm_fl.kernels import mamba_kernels as mk  # noqa: E402


def _run(kernel, planned):
    interpret(kernel, planned.grid, planned.args, planned.kwargs)


@pytest.mark.parametrize("seqlen", [1, 2])
@pytest.mark.parametrize("indexed", [True, False])
def test_conv1d_update_matches_the_reference(seqlen, indexed):
    g = torch.Generator().manual_seed(0)
    dim, width, batch = 80, 4, 3
    x = torch.randn(batch, dim, seqlen, generator=g)
    if seqlen == 1:
        x = x[..., 0]
    state = torch.randn(5, dim, width - 1, generator=g)
    weight, bias = torch.randn(dim, width, generator=g), torch.randn(dim, generator=g)
    indices = torch.tensor([[3], [0], [1]], dtype=torch.int32) if indexed else None
    expected_state, expected = state.clone(), torch.zeros_like(x)
    ref.causal_conv1d_update(x, expected_state, weight, expected, bias, "silu", indices)
    got_state, got = state.clone(), torch.zeros_like(x)
    _run(
        mk.conv1d_update_kernel,
        mk.conv1d_update_launch(x, got_state, weight, got, bias, True, indices, 0),
    )
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got_state, expected_state, atol=0, rtol=0)


def test_conv1d_update_in_place_over_its_input():
    # vLLM's decode convolution without ``out`` overwrites x: the kernel reads before it writes
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 64, 3, generator=g)
    state, weight = torch.randn(2, 64, 3, generator=g), torch.randn(64, 4, generator=g)
    expected_state, expected = state.clone(), torch.zeros_like(x)
    ref.causal_conv1d_update(x, expected_state, weight, expected, None, None)
    _run(
        mk.conv1d_update_kernel, mk.conv1d_update_launch(x, state, weight, x, None, False, None, 0)
    )
    torch.testing.assert_close(x, expected, atol=1e-5, rtol=1e-5)


@needs_interpreter_loops
@pytest.mark.parametrize("width", [3, 4])
def test_conv1d_fwd_matches_the_reference(width):
    g = torch.Generator().manual_seed(2)
    dim, tokens = 72, 12
    x = torch.randn(tokens, dim, generator=g).t()  # the mixer's channel-last [dim, tokens]
    weight, bias = torch.randn(dim, width, generator=g), torch.randn(dim, generator=g)
    states = torch.randn(6, dim, width - 1, generator=g)
    qsl = torch.tensor([0, 2, 7, 8, 12], dtype=torch.int32)
    indices = torch.tensor([2, 5, 0, 1], dtype=torch.int32)  # block 0: padding
    initial = torch.tensor([1, 0, 1, 1], dtype=torch.bool)
    expected_states, expected = states.clone(), torch.zeros(dim, tokens)
    ref.causal_conv1d_fn(x, weight, expected_states, qsl, expected, bias, indices, initial)
    got_states, got = states.clone(), torch.zeros(dim, tokens)
    _run(
        mk.conv1d_fwd_kernel,
        mk.conv1d_fwd_launch(x, weight, got_states, qsl, got, bias, indices, initial, True, -1, 0),
    )
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got_states, expected_states, atol=0, rtol=0)


@needs_interpreter_loops
@pytest.mark.parametrize("mixer_like", [True, False])
def test_ssm_update_matches_the_reference(mixer_like):
    g = torch.Generator().manual_seed(3)
    heads, dim, dstate, groups = 4, 16, 16, 2
    tokens = 3
    state = torch.randn(6, heads, dim, dstate, generator=g)
    x = torch.randn(tokens, heads, dim, generator=g)
    dt = torch.randn(tokens, heads, dim, generator=g)
    A = -torch.rand(heads, dim, dstate, generator=g)
    B, C = torch.randn(tokens, groups, dstate, generator=g), torch.randn(
        tokens, groups, dstate, generator=g
    )
    D, dt_bias = torch.randn(heads, dim, generator=g), torch.randn(heads, dim, generator=g)
    if mixer_like:  # one token per sequence, block 0 as padding, softplus
        z, cu, softplus = None, None, True
        src = dst = torch.tensor([[2], [0], [5]], dtype=torch.int32)
    else:  # varlen sequences of 2 and 1 tokens, a gate, states written elsewhere
        z, softplus = torch.randn(tokens, heads, dim, generator=g), False
        cu = torch.tensor([0, 2, 3], dtype=torch.int32)
        src, dst = torch.tensor([1, 3], dtype=torch.int32), torch.tensor([4, 2], dtype=torch.int32)
    expected_state, expected = state.clone(), torch.zeros_like(x)
    ref.selective_state_update(
        expected_state, x, dt, A, B, C, D, dt_bias, expected, z, softplus, src, dst, 0, None, cu
    )
    got_state, got = state.clone(), torch.zeros_like(x)
    _run(
        mk.ssm_update_kernel,
        mk.ssm_update_launch(
            got_state, x, dt, A, B, C, D, dt_bias, got, z, softplus, src, dst, 0, cu
        ),
    )
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got_state, expected_state, atol=1e-4, rtol=1e-4)

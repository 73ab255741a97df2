"""The Mamba2 mixer's kernels reach the dispatch ops (``vllm_fl.mamba``): the adapters replace
exactly the mixer module's four names, call the ops (counted), give vLLM's results, and give
the names back; an op the OOT policy excludes keeps vLLM's function."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm")

import torch  # noqa: E402
from vllm_fl import mamba  # noqa: E402
from vllm_fl.dispatch.policy import current as dispatch_policy  # noqa: E402


@pytest.fixture
def hook(monkeypatch):
    for var in ("VLLM_FL_OOT_BLACKLIST", "VLLM_FL_OOT_WHITELIST", "VLLM_FL_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    dispatch_policy.reset_global_policy()
    mamba._reset_for_tests()
    yield mamba
    mamba._reset_for_tests()
    dispatch_policy.reset_global_policy()


def _mixer():
    import importlib

    return importlib.import_module(mamba.MIXER_MODULE)


def test_install_replaces_the_mixer_names_and_reset_gives_them_back(hook):
    mixer = _mixer()
    before = {name: getattr(mixer, name) for name in mamba.OPS}
    sites = hook.install()
    assert sites == sorted(f"{mamba.MIXER_MODULE}.{name}" for name in mamba.OPS)
    for name in mamba.OPS:
        assert getattr(mixer, name) is getattr(mamba, name)
    assert hook.install() == sites  # idempotent
    hook._reset_for_tests()
    assert {name: getattr(mixer, name) for name in mamba.OPS} == before


def test_a_blacklisted_op_keeps_vllms_function(hook, monkeypatch):
    monkeypatch.setenv("VLLM_FL_OOT_BLACKLIST", "selective_state_update")
    dispatch_policy.reset_global_policy()
    mixer = _mixer()
    vllm_ssu = mixer.selective_state_update
    sites = hook.install()
    assert f"{mamba.MIXER_MODULE}.selective_state_update" not in sites
    assert mixer.selective_state_update is vllm_ssu
    assert mixer.causal_conv1d_update is mamba.causal_conv1d_update


def test_decode_convolution_through_the_adapter_matches_vllms(hook):
    mixer = _mixer()
    vllm_update = mixer.causal_conv1d_update  # vLLM's CPU kernel on this platform
    hook.install()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 32, generator=g)
    weight, bias = torch.randn(32, 4, generator=g), torch.randn(32, generator=g)
    state = torch.randn(4, 32, 3, generator=g)
    indices = torch.tensor([[1], [3], [2]], dtype=torch.int32)
    vllm_state = state.clone()
    expected = vllm_update(x.clone(), vllm_state, weight, bias, "silu", conv_state_indices=indices)
    got = mixer.causal_conv1d_update(x, state, weight, bias, True, conv_state_indices=indices)
    assert got is x  # without ``out``, vLLM's kernel writes over its input
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(state, vllm_state, atol=0, rtol=0)
    assert mamba.call_counts() == {"causal_conv1d_update": 1}


def test_prefill_convolution_keeps_xs_layout(hook):
    # the mixer views slices of the transposed result as [tokens, heads, head_dim]
    mixer = _mixer()
    hook.install()
    x = torch.randn(9, 16).t()
    out = mixer.causal_conv1d_fn(
        x,
        torch.randn(16, 4),
        None,
        conv_states=torch.zeros(3, 16, 3),
        query_start_loc=torch.tensor([0, 4, 9], dtype=torch.int32),
        cache_indices=torch.tensor([1, 2], dtype=torch.int32),
        has_initial_state=torch.tensor([False, False]),
        metadata=object(),
    )
    assert out.stride() == x.stride() and out.shape == x.shape
    out.t()[:, :8].view(9, 2, 4)  # as the mixer's split and view
    assert mamba.call_counts() == {"causal_conv1d_fn": 1}


def test_the_scan_returns_states_in_the_state_dtype(hook):
    mixer = _mixer()
    hook.install()
    x = torch.randn(8, 2, 4)
    out = torch.empty_like(x)
    states = mixer.mamba_chunk_scan_combined_varlen(
        x,
        torch.randn(8, 2),
        -torch.rand(2),
        torch.randn(8, 1, 4),
        torch.randn(8, 1, 4),
        chunk_size=4,
        cu_seqlens=torch.tensor([0, 8], dtype=torch.int32),
        cu_chunk_seqlens=torch.tensor([0, 4, 8], dtype=torch.int32),
        last_chunk_indices=torch.tensor([1], dtype=torch.int32),
        seq_idx=torch.tensor([0, 0], dtype=torch.int32),
        out=out,
        dt_softplus=True,
        state_dtype=torch.float64,
    )
    assert states.shape == (1, 2, 4, 4) and states.dtype == torch.float64
    assert torch.isfinite(out).all()

"""The cuda impl of ``causal_conv1d_update`` on both of vLLM's conventions: 0.32's function takes
``out``; 0.24's has none and writes its result over the ``x`` it is given (stand-ins for vLLM's
Triton function here: it needs a GPU)."""

from __future__ import annotations

import pytest
import torch

from vllm_fl.backends.cuda.impl import mamba


def _conv(x, conv_state, weight, bias=None, activation=None, **options):
    """What both releases compute, as a stand-in: here simply x * 2 + 1."""
    return x * 2 + 1


def _vllm_0_24(
    x,
    conv_state,
    weight,
    bias=None,
    activation=None,
    conv_state_indices=None,
    num_accepted_tokens=None,
    query_start_loc=None,
    max_query_len=-1,
    null_block_id=0,
):
    x.copy_(_conv(x, conv_state, weight))  # 0.24: ``out = x``
    return x


def _vllm_0_32(
    x,
    conv_state,
    weight,
    bias=None,
    activation=None,
    conv_state_indices=None,
    num_accepted_tokens=None,
    query_start_loc=None,
    max_query_len=-1,
    null_block_id=0,
    out=None,
):
    out.copy_(_conv(x, conv_state, weight))
    return out


@pytest.fixture(params=[_vllm_0_24, _vllm_0_32], ids=["vllm-0.24", "vllm-0.32"])
def release(request, monkeypatch):
    monkeypatch.setattr(mamba, "_vllm", lambda module, name: request.param)
    return request.param


def _call(x, output):
    mamba.causal_conv1d_update(x, torch.zeros(3, 4, 2), torch.ones(4, 3), output)


def test_the_result_lands_in_output_and_x_stays_as_it_was(release):
    x = torch.randn(3, 4)
    before = x.clone()
    output = torch.empty_like(x)
    _call(x, output)
    assert torch.equal(output, before * 2 + 1)
    assert torch.equal(x, before)


def test_output_may_be_x_itself(release):
    """The mixer's 0.24 calls pass no ``out``: the adapter gives the op x as its output."""
    x = torch.randn(3, 4)
    before = x.clone()
    _call(x, x)
    assert torch.equal(x, before * 2 + 1)

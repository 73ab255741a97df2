"""Replaying a wrapper's Triton launches (`vllm_fl.kernels.replay`) and vLLM's decode attention
through it (`vllm_fl.kernels.attention.unified_attention`), without a GPU: stand-in kernels
compute with torch, at their launch through Triton's entry (``kernel.run``) and at a replay
through their compiled kernel alike, so that a replay that passes a wrong tensor writes a wrong
output."""

from __future__ import annotations

import inspect
import logging
from types import SimpleNamespace

import pytest
import torch

from vllm_fl.kernels import launch, replay

EMPTY = inspect.Parameter.empty


class Compiled:
    """What ``kernel.run`` returns: launched as ``compiled[grid](*every_parameter)``."""

    def __init__(self, names, body):
        self.names, self.body = names, body

    def __getitem__(self, grid):
        return lambda *values: self.body(grid, dict(zip(self.names, values)))


class StandInKernel:
    """A ``triton.jit`` kernel's interface: ``params``, and ``run(*args, grid, warmup,
    **kwargs)`` running ``body`` and returning its compiled kernel, which runs
    ``compiled_body`` (``body`` unless given) on every parameter's value."""

    def __init__(self, names, body, defaults=None, compiled_body=None):
        defaults = defaults or {}
        self.params = [SimpleNamespace(name=n, default=defaults.get(n, EMPTY)) for n in names]
        self.body, self.compiled_body = body, compiled_body or body
        self.entry_launches = 0

    def run(self, *args, grid, warmup, **kwargs):
        self.entry_launches += 1
        values = dict(zip([p.name for p in self.params], args), **kwargs)
        for p in self.params:
            values.setdefault(p.name, p.default)
        self.body(grid, values)
        return Compiled([p.name for p in self.params], self.compiled_body)

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(*args, grid=grid, warmup=False, **kwargs)


@pytest.fixture
def plannable(monkeypatch):
    """A Triton whose compiled kernels' calling convention `launch` knows."""
    monkeypatch.setattr(launch, "triton_supported", lambda: True)


def scale_kernel(**options):
    """out = x * factor + bias: ``bias`` a kept buffer, ``factor`` a plain value."""

    def body(grid, v):
        v["out"].copy_(v["x"] * v["factor"] + v["bias"])

    return StandInKernel(["out", "x", "bias", "factor", "BLOCK"], body, {"BLOCK": 64}, **options)


def test_a_replay_makes_the_recorded_launches_with_the_new_tensors(plannable):
    kernel = scale_kernel()
    module = SimpleNamespace(scale_kernel=kernel)
    bias = torch.randn(4)

    def wrapper(x, out):  # as vLLM's wrappers launch: keyword arguments, a tuple grid
        module.scale_kernel[(4,)](out=out, x=x, bias=bias, factor=3.0)

    x, out = torch.randn(4), torch.empty(4)
    found = replay.record(
        module, ["scale_kernel"], lambda: wrapper(x, out), {"x": x, "out": out}, kept=[bias]
    )
    assert module.scale_kernel is kernel  # the module's kernel is back
    torch.testing.assert_close(out, x * 3.0 + bias)  # the recorded call ran
    assert found is not None and kernel.entry_launches == 1
    (step,) = found.steps
    assert step.grid == (4, 1, 1) and dict((n, i) for i, n in step.slots) == {"out": 0, "x": 1}
    assert step.values[2] is bias and step.values[3:] == (3.0, 64)  # kept, value, default
    assert step.values[:2] == (None, None)  # the call's tensors are not held
    x2, out2 = torch.randn(4), torch.empty(4)
    found({"x": x2, "out": out2})
    assert kernel.entry_launches == 1  # through the compiled kernel, not the entry
    torch.testing.assert_close(out2, x2 * 3.0 + bias)


@pytest.mark.parametrize("why", ["a tensor of the call's own", "a callable grid", "old Triton"])
def test_no_replay_where_it_could_not_be_exact(plannable, monkeypatch, why):
    kernel = scale_kernel()
    module = SimpleNamespace(scale_kernel=kernel)
    x, out = torch.randn(4), torch.empty(4)

    def wrapper():
        bias = torch.zeros(4)  # made per call: a replay would hold a stale one
        grid = (lambda meta: (4,)) if why == "a callable grid" else (4,)
        if why != "a tensor of the call's own":
            bias = kept
        module.scale_kernel[grid](out=out, x=x, bias=bias, factor=2.0)

    kept = torch.ones(4)
    if why == "old Triton":
        monkeypatch.setattr(launch, "triton_supported", lambda: False)
    found = replay.record(module, ["scale_kernel"], wrapper, {"x": x, "out": out}, kept=[kept])
    assert found is None
    assert kernel.entry_launches == 1 and module.scale_kernel is kernel  # it ran, as it was


def test_the_module_gets_its_kernels_back_when_the_call_fails(plannable):
    kernel = scale_kernel()
    module = SimpleNamespace(scale_kernel=kernel)

    def wrapper():
        raise RuntimeError("the wrapper failed")

    with pytest.raises(RuntimeError, match="the wrapper failed"):
        replay.record(module, ["scale_kernel"], wrapper, {})
    assert module.scale_kernel is kernel


# vLLM's decode attention through the replay -----------------------------------------------

vllm_attention_ops = pytest.importorskip("vllm.v1.attention.ops.triton_unified_attention")
from vllm_fl.kernels import attention  # noqa: E402


def _attention_kernel(**options):
    """out = q * scale + each token's sequence length + the first scratch element."""

    def body(grid, v):
        lens = v["seq_lens_ptr"]
        per_token = lens.repeat_interleave(v["query_ptr"].shape[0] // lens.shape[0])
        v["output_ptr"].copy_(
            v["query_ptr"] * v["scale"]
            + per_token.view(-1, 1, 1)
            + v["segm_output_ptr"].flatten()[0]
        )

    names = ["output_ptr", "query_ptr", "key_cache_ptr", "seq_lens_ptr", "segm_output_ptr"]
    return StandInKernel([*names, "scale", "num_seqs"], body, **options)


@pytest.fixture
def decode(plannable, monkeypatch):
    """vLLM's module with a stand-in ``unified_attention`` that launches a stand-in kernel as
    the real wrapper does; the plugin's replay state fresh; the tensors 'on the GPU'."""
    kernel = _attention_kernel()
    wrapper_calls = []

    def unified_attention(q, k, v, out, seqused_k, softmax_scale, softmax_segm_output=None, **_):
        wrapper_calls.append(q)
        vllm_attention_ops.kernel_unified_attention[(q.shape[0], k.shape[2])](
            output_ptr=out,
            query_ptr=q,
            key_cache_ptr=k,
            seq_lens_ptr=seqused_k,
            segm_output_ptr=softmax_segm_output if softmax_segm_output is not None else out,
            scale=softmax_scale,
            num_seqs=len(seqused_k),
        )

    # The scratch is allocated with torch.empty and kept; the stand-in kernel reads its first
    # element, so a fresh one filled with a known value (memory a long-lived process reuses can
    # hold a NaN, and NaN never compares equal)
    scratch = attention.decode_scratch

    def filled_scratch(*args, **kwargs):
        found = scratch(*args, **kwargs)
        found[1].fill_(0.25)
        return found

    monkeypatch.setattr(attention, "_scratch", {})
    monkeypatch.setattr(attention, "decode_scratch", filled_scratch)
    monkeypatch.setattr(vllm_attention_ops, "unified_attention", unified_attention)
    monkeypatch.setattr(vllm_attention_ops, "kernel_unified_attention", kernel)
    monkeypatch.setattr(attention, "_decode_replays", {})
    monkeypatch.setattr(attention, "_replaying", True)
    monkeypatch.setattr(launch, "on_current_gpu", lambda t: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    return SimpleNamespace(kernel=kernel, wrapper_calls=wrapper_calls)


def _batch(seqs=3, heads=4, kv_heads=2, head_size=8, query_len=1):
    key_cache, value_cache = torch.randn(2, 6, 16, kv_heads, head_size).unbind(0)
    query = torch.randn(seqs * query_len, heads, head_size)
    return dict(
        query=query,
        key_cache=key_cache,
        value_cache=value_cache,
        output=torch.empty_like(query),
        block_table=torch.arange(seqs * 2, dtype=torch.int32).reshape(seqs, 2),
        seq_lens=torch.randint(1, 32, (seqs,), dtype=torch.int32).float(),
        query_start_loc=torch.arange(seqs + 1, dtype=torch.int32) * query_len,
        max_query_len=query_len,
        max_seq_len=32,
        softmax_scale=0.5,
        causal=True,
        window_left=-1,
        logits_soft_cap=0.0,
        sinks=None,
    )


def _expected(batch):
    seqs = batch["seq_lens"].shape[0]
    per_token = batch["seq_lens"].repeat_interleave(batch["query"].shape[0] // seqs)
    query = batch["query"]
    scratch = attention.decode_scratch(
        query.device, query.shape[1], batch["key_cache"].shape[2], 8, query.dtype
    )[1]
    return batch["query"] * 0.5 + per_token.view(-1, 1, 1) + scratch.flatten()[0]


def test_decode_batches_of_one_layout_replay_vllms_launches(decode):
    batches = [_batch() for _ in range(3)]
    for batch in batches:
        attention.unified_attention(**batch)
        torch.testing.assert_close(batch["output"], _expected(batch))
    # the wrapper ran once, for the first batch; its launch ran once more there, as the check
    assert len(decode.wrapper_calls) == 1 and decode.kernel.entry_launches == 1
    # another layout (more sequences) is recorded anew
    other = _batch(seqs=5)
    attention.unified_attention(**other)
    torch.testing.assert_close(other["output"], _expected(other))
    assert len(decode.wrapper_calls) == 2


def test_batches_with_prefills_and_graph_captures_go_through_vllms_wrapper(decode, monkeypatch):
    prefill = _batch(query_len=4)
    attention.unified_attention(**prefill)
    attention.unified_attention(**prefill)
    assert len(decode.wrapper_calls) == 2 and attention._decode_replays == {}
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    for _ in range(2):
        attention.unified_attention(**_batch())
    assert len(decode.wrapper_calls) == 4 and attention._decode_replays == {}


def _refuse(grid, values):
    raise TypeError("a launcher that takes other arguments")


@pytest.mark.parametrize(
    "compiled_body, says",
    [
        (lambda grid, v: v["output_ptr"].copy_(v["query_ptr"] * 2 + 1), "did not reproduce"),
        (_refuse, "failed (TypeError: a launcher that takes other arguments)"),
    ],
)
def test_a_replay_that_disagrees_with_vllm_stops_replays(
    decode, monkeypatch, caplog, compiled_body, says
):
    wrong = _attention_kernel(compiled_body=compiled_body)
    monkeypatch.setattr(vllm_attention_ops, "kernel_unified_attention", wrong)
    batch = _batch()
    with caplog.at_level(logging.WARNING, logger="vllm_fl.kernels.attention"):
        attention.unified_attention(**batch)
    assert says in caplog.text
    torch.testing.assert_close(batch["output"], _expected(batch))  # vLLM's result stands
    assert attention._replaying is False
    later = _batch(seqs=4)
    attention.unified_attention(**later)
    torch.testing.assert_close(later["output"], _expected(later))
    assert len(decode.wrapper_calls) == 2

"""Bring-up mode inside one process, without vLLM: the verifying callable installed as an op's
selection records the selected impl's distance from the reference per call site, shapes and
dtype, returns the selected impl's result unchanged, and nothing of it exists while it is off."""

from __future__ import annotations

import math
import types

import pytest
import torch

import vllm_fl.dispatch as d
from vllm_fl.dispatch import BackendImplKind, OpImpl, OpManager, OpRegistry
from vllm_fl.backends.reference.impl import activation, moe
from vllm_fl.dispatch.runtime.binding import IMPL_ATTR
from vllm_fl.verify import current, disable, enable
from vllm_fl.verify.report import format_report, merge, summary_line


@pytest.fixture(autouse=True)
def verification_off(monkeypatch):
    monkeypatch.setenv("VLLM_FL_PLATFORM", "cpu")
    d.reset_global_policy()
    yield
    disable()


def _register(registry: OpRegistry, op: str, reference, impl) -> OpRegistry:
    """``op`` with ``reference`` as its reference impl and ``impl`` as vendor ``test``'s."""
    registry.register_impl(OpImpl(op, "reference.torch", BackendImplKind.REFERENCE, reference))
    registry.register_impl(
        OpImpl(op, "vendor.test", BackendImplKind.VENDOR, impl, vendor="test", priority=100)
    )
    return registry


def _manager(**impls) -> OpManager:
    registry = OpRegistry()
    refs = {"silu_and_mul": activation.silu_and_mul, "topk_softmax": moe.topk_softmax}
    for op, fn in impls.items():
        _register(registry, op, refs[op], fn)
    return OpManager(registry)


def biased(self, x):
    return activation.silu_and_mul(self, x) + 0.25


class Net(torch.nn.Module):
    """Two blocks, each with its own activation layer (a stand-in for vLLM's SiluAndMul)."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(
            torch.nn.ModuleDict({"act_fn": torch.nn.Identity()}) for _ in range(2)
        )


def test_off_the_trampoline_calls_the_impl_itself():
    manager = _manager(silu_and_mul=biased)
    manager.binding("silu_and_mul").select()
    cells = dict(
        zip(
            manager.binding("silu_and_mul").fn.__code__.co_freevars,
            manager.binding("silu_and_mul").fn.__closure__,
        )
    )
    assert cells["_impl"].cell_contents is biased
    assert current() is None


def test_a_biased_impl_is_recorded_per_call_site_and_the_model_keeps_its_result():
    manager = _manager(silu_and_mul=biased)
    net = Net()
    verifier = enable(net, ops=True, every=1, steps=0)
    fn = manager.binding("silu_and_mul").fn
    x = torch.randn(3, 16)
    outs = [fn(block["act_fn"], x) for block in net.layers]
    # the trampoline holds the verifying callable, which carries the impl
    binding = manager.binding("silu_and_mul")
    impl_cell = dict(zip(binding.fn.__code__.co_freevars, binding.fn.__closure__))["_impl"]
    assert getattr(impl_cell.cell_contents, IMPL_ATTR) is biased
    for out in outs:
        torch.testing.assert_close(out, activation.silu_and_mul(None, x) + 0.25)
    rows = {r.site: r for r in verifier.recorder.rows.values()}
    assert set(rows) == {"layers.0.act_fn", "layers.1.act_fn"}
    for row in rows.values():
        assert row.op == "silu_and_mul" and row.impl == "vendor.test"
        assert row.shapes == "x=3x16" and row.dtype == "float32"
        assert row.calls == row.exceeded == 1
        assert math.isclose(row.max_abs, 0.25, rel_tol=1e-5)
        assert row.ratio > 1 and (row.atol, row.rtol) == (1e-05, 1.3e-06)
    assert rows["layers.0.act_fn"].first_exceeded["call"] == 1
    text = format_report(merge([verifier.recorder.to_json()]))
    assert "silu_and_mul" in text and "layers.1.act_fn" in text
    disable()
    assert impl_cell.cell_contents is biased  # off again: the impl itself


def test_every_kth_call_and_a_list_of_ops():
    manager = _manager(silu_and_mul=biased)
    verifier = enable(ops=frozenset({"silu_and_mul"}), every=3)
    fn = manager.binding("silu_and_mul").fn
    layer = types.SimpleNamespace()
    for _ in range(7):
        fn(layer, torch.randn(2, 8))
    assert verifier.recorder.ops["silu_and_mul"] == {
        "impl": "vendor.test",
        "calls": 7,
        "verified": 3,
        "unverified": 0,
    }
    disable()
    verifier = enable(ops=frozenset({"rms_norm"}))
    fn(layer, torch.randn(2, 8))
    assert not verifier.recorder.rows  # not an op asked for


def _topk_args(tokens=5, experts=8, k=2):
    return dict(
        topk_weights=torch.empty(tokens, k),
        topk_ids=torch.empty(tokens, k, dtype=torch.int32),
        token_expert_indices=torch.empty(tokens, k, dtype=torch.int32),
        gating_output=torch.randn(tokens, experts),
        renormalize=True,
    )


def test_an_op_that_writes_its_outputs_is_compared_on_them_in_canonical_form():
    def reordered(
        topk_weights,
        topk_ids,
        token_expert_indices,
        gating_output,
        renormalize=False,
        e_score_correction_bias=None,
        is_padding=None,
    ):
        moe.topk_softmax(
            topk_weights,
            topk_ids,
            token_expert_indices,
            gating_output,
            renormalize,
            e_score_correction_bias,
            is_padding,
        )
        # the op leaves the order of a token's experts open: the canonical form sorts them
        topk_weights.copy_(topk_weights.flip(-1))
        topk_ids.copy_(topk_ids.flip(-1))

    manager = _manager(topk_softmax=reordered)
    verifier = enable(ops=True)
    args = _topk_args()
    manager.binding("topk_softmax").fn(**args)
    (row,) = verifier.recorder.rows.values()
    assert row.site == "-" and row.exceeded == 0, row
    assert row.shapes == "gating_output=5x8"
    # what the model got is what the selected impl wrote
    expected = _topk_args()
    expected["gating_output"] = args["gating_output"]
    moe.topk_softmax(**expected)
    torch.testing.assert_close(args["topk_weights"], expected["topk_weights"].flip(-1))


def test_an_impl_writing_into_an_input_is_noted():
    def scribbles(
        topk_weights,
        topk_ids,
        token_expert_indices,
        gating_output,
        renormalize=False,
        e_score_correction_bias=None,
        is_padding=None,
    ):
        moe.topk_softmax(
            topk_weights,
            topk_ids,
            token_expert_indices,
            gating_output.clone(),
            renormalize,
            e_score_correction_bias,
            is_padding,
        )
        gating_output.zero_()

    manager = _manager(topk_softmax=scribbles)
    verifier = enable(ops=True)
    manager.binding("topk_softmax").fn(**_topk_args())
    (row,) = verifier.recorder.rows.values()
    assert row.exceeded == 1 and "the impl wrote into its input 'gating_output'" in row.notes


def test_a_failing_reference_is_not_verified_never_over_tolerance_and_the_call_returns():
    def broken_reference(self, x):
        raise RuntimeError("no kernel for this shape")

    manager = OpManager(_register(OpRegistry(), "silu_and_mul", broken_reference, biased))
    verifier = enable(ops=True)
    out = manager.binding("silu_and_mul").fn(types.SimpleNamespace(), torch.zeros(3, 8))
    torch.testing.assert_close(out, torch.full((3, 4), 0.25))
    (row,) = verifier.recorder.rows.values()
    assert (row.exceeded, row.unverified) == (0, 1)
    assert row.notes == ["not verified: RuntimeError: no kernel for this shape"]
    report = merge([verifier.recorder.to_json()])
    assert report.culprits() == []
    assert summary_line(report) == (
        "0 call(s) verified, 0 over tolerance; 1 not verified (silu_and_mul)"
    )


class SharedNet(torch.nn.Module):
    """Two blocks sharing one activation layer (as vLLM shares rotary embeddings); each block
    calls the op on it when run."""

    def __init__(self, fn):
        super().__init__()
        shared = torch.nn.Identity()
        self.layers = torch.nn.ModuleList(Block(shared, fn) for _ in range(2))

    def forward(self, x):
        for block in self.layers:
            x = block(x)
        return x


class Block(torch.nn.Module):
    def __init__(self, act, fn):
        super().__init__()
        self.act = act
        self._fn = fn

    def forward(self, x):
        return self._fn(self.act, x)[..., : x.shape[-1] // 2].repeat(1, 2)


def test_a_shared_layer_is_named_under_the_block_running_it_and_steps_bound_the_checks():
    manager = _manager(silu_and_mul=biased)
    net = SharedNet(manager.binding("silu_and_mul").fn)
    verifier = enable(net, ops=True, steps=1)
    net(torch.randn(2, 8))  # step 1: verified
    net(torch.randn(2, 8))  # step 2: past VLLM_FL_VERIFY_STEPS=1
    rows = {r.site: r.calls for r in verifier.recorder.rows.values()}
    assert rows == {"layers.0.act": 1, "layers.1.act": 1}
    assert verifier.recorder.ops["silu_and_mul"] == {
        "impl": "vendor.test",
        "calls": 4,
        "verified": 2,
        "unverified": 0,
    }


def _cache_manager(writer) -> tuple[OpManager, list]:
    from vllm_fl.backends.reference.impl import attention

    seen: list = []

    def reference(key, value, key_cache, value_cache, slot_mapping):
        seen.append(tuple(key_cache.shape))
        return attention.reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping)

    registry = _register(OpRegistry(), "reshape_and_cache_flash", reference, writer)
    return OpManager(registry), seen


def _cache_call(manager, dtype=torch.bfloat16):
    torch.manual_seed(0)
    key, value = torch.randn(5, 2, 8, dtype=dtype), torch.randn(5, 2, 8, dtype=dtype)
    key_cache = torch.randn(64, 16, 2, 8, dtype=dtype)
    value_cache = torch.randn(64, 16, 2, 8, dtype=dtype)
    slots = torch.tensor([17, 0, -1, 1000, 3])  # slot 0 written by token 1, token 2 skipped
    manager.binding("reshape_and_cache_flash").fn(key, value, key_cache, value_cache, slots)
    return key_cache


def test_a_cache_write_is_checked_on_its_slots_and_the_cache_is_never_copied():
    from vllm_fl.backends.reference.impl import attention

    manager, seen = _cache_manager(attention.reshape_and_cache_flash)
    verifier = enable(ops=True)
    cache = _cache_call(manager)
    (row,) = verifier.recorder.rows.values()
    assert (row.calls, row.exceeded, row.unverified) == (1, 0, 0), row
    # the references (in bfloat16 and in float32) wrote a cache of one slot per token
    assert seen == [(5, 1, 2, 8), (5, 1, 2, 8)]
    assert cache.shape == (64, 16, 2, 8)


def test_a_kernel_writing_a_wrong_slot_is_named():
    from vllm_fl.backends.reference.impl import attention

    def off_by_one(key, value, key_cache, value_cache, slot_mapping):
        shifted = torch.where(slot_mapping >= 0, slot_mapping + 1, slot_mapping)
        attention.reshape_and_cache_flash(key, value, key_cache, value_cache, shifted)

    manager, _ = _cache_manager(off_by_one)
    verifier = enable(ops=True)
    _cache_call(manager)
    (row,) = verifier.recorder.rows.values()
    assert (row.op, row.calls, row.exceeded) == ("reshape_and_cache_flash", 1, 1)


def test_the_references_get_an_ops_length_bounds_rounded_up_to_a_power_of_two():
    """paged_attention's max_query_len and max_seq_len are ``bounds`` in ops.yaml: the references
    get them rounded up (a check recorded as a CUDA graph then repeats while the sequences
    grow), the impl the call's own, and the rounded bound changes nothing in the report."""
    from vllm_fl.backends.reference.impl import attention

    bounds: list = []

    def reference(*args, **kwargs):
        bounds.append((kwargs["max_query_len"], kwargs["max_seq_len"]))
        return attention.paged_attention(*args, **kwargs)

    def impl(*args, **kwargs):
        bounds.append(("impl", kwargs["max_query_len"], kwargs["max_seq_len"]))
        return attention.paged_attention(*args, **kwargs)

    manager = OpManager(_register(OpRegistry(), "paged_attention", reference, impl))
    verifier = enable(ops=True)
    gen = torch.Generator().manual_seed(3)
    caches = [torch.randn(12, 16, 2, 32, generator=gen, dtype=torch.float32) for _ in "kv"]
    query = torch.randn(3, 4, 32, generator=gen).bfloat16()
    manager.binding("paged_attention").fn(
        query=query,
        key_cache=caches[0].bfloat16(),
        value_cache=caches[1].bfloat16(),
        output=torch.zeros(3, 4, 32, dtype=torch.bfloat16),
        block_table=torch.randperm(12, generator=gen)[:12].view(3, 4).to(torch.int32),
        seq_lens=torch.tensor([9, 50, 33], dtype=torch.int32),
        query_start_loc=torch.tensor([0, 1, 2, 3], dtype=torch.int32),
        max_query_len=1,
        max_seq_len=50,
        softmax_scale=0.2,
    )
    (row,) = verifier.recorder.rows.values()
    assert (row.calls, row.exceeded, row.unverified) == (1, 0, 0), row
    assert bounds == [("impl", 1, 50), (1, 64), (1, 64)]


def test_a_decode_checks_replay_key_stays_while_the_sequences_grow():
    """The key a check is recorded under holds the call's bounds as the references get them
    (rounded), not the call's own: a decode step's check repeats as max_seq_len grows by one."""
    from vllm_fl.backends.reference.impl import attention
    from vllm_fl.verify.replay import _Leaves

    keys: list[tuple] = []

    class KeyOnly:
        """Replays that only note each check's key; every check then runs eagerly."""

        refused: dict = {}

        def run(self, op, what, check, state, keep, constants=()):
            keys.append((op, what, constants, tuple(_Leaves(state, keep).key)))
            return None

    manager = OpManager(
        _register(
            OpRegistry(), "paged_attention", attention.paged_attention, attention.paged_attention
        )
    )
    verifier = enable(ops=True)
    verifier.replays = KeyOnly()
    gen = torch.Generator().manual_seed(4)
    caches = [torch.randn(12, 16, 2, 32, generator=gen).bfloat16() for _ in "kv"]
    table = torch.randperm(12, generator=gen).view(3, 4).to(torch.int32)
    # (the first call reaches the impl through the dispatch's resolution, which passes the
    # arguments as given; the next ones through the bound path, with the defaults filled in)
    for longest in (50, 51, 52):
        manager.binding("paged_attention").fn(
            query=torch.randn(3, 4, 32, generator=gen).bfloat16(),
            key_cache=caches[0],
            value_cache=caches[1],
            output=torch.zeros(3, 4, 32, dtype=torch.bfloat16),
            block_table=table,
            seq_lens=torch.tensor([9, longest, 33], dtype=torch.int32),
            query_start_loc=torch.tensor([0, 1, 2, 3], dtype=torch.int32),
            max_query_len=1,
            max_seq_len=longest,
            softmax_scale=0.2,
        )
    assert len(keys) == 3 and keys[1] == keys[2]
    assert sum(row.calls for row in verifier.recorder.rows.values()) == 3
    assert not any(row.exceeded or row.unverified for row in verifier.recorder.rows.values())

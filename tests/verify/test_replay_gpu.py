"""Bring-up mode's checks replayed as CUDA graphs report what the same checks run eagerly report:
the same calls verified, the same errors and ratios, a wrong kernel over tolerance on every
replayed call; ops whose references read back to the host replay the comparison alone."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from benchmarks.cases import Call, bench_cases
from vllm_fl.dispatch import CHECKS, BackendImplKind, get_default_manager
from vllm_fl.verify.verifier import Verifier

pytestmark = pytest.mark.gpu

CALLS = 5
OPS = ["rms_norm", "silu_and_mul", "rotary_embedding", "paged_attention", "reshape_and_cache_flash"]


def _decodes(seed: int, caches: tuple | None, prefill: bool = False) -> Call:
    """paged_attention on a batch of 8 decodes (the benchmark cases mix in prefills), the
    sequences a token longer with each seed as in a decode step; ``prefill``: 8 queries of 3
    sequences instead (its reference reads the lengths back to the host)."""
    gen = torch.Generator().manual_seed(seed)
    if caches is None:
        caches = tuple(torch.randn(40, 16, 1, 128, generator=gen).bfloat16().cuda() for _ in "kv")
    seq_lens = torch.tensor([1, 33, 100, 17, 64, 5, 128, 77], dtype=torch.int32)
    values = {
        "query": torch.randn(8, 8, 128, generator=gen).bfloat16().cuda(),
        "key_cache": caches[0],
        "value_cache": caches[1],
        "output": torch.zeros(8, 8, 128, dtype=torch.bfloat16, device="cuda"),
        "block_table": torch.randint(0, 40, (8, 8), generator=gen, dtype=torch.int32).cuda(),
        "seq_lens": (seq_lens + seed).cuda(),
        "query_start_loc": torch.arange(9, dtype=torch.int32).cuda(),
        "max_query_len": 1,
        "max_seq_len": 100 + seed,
        "softmax_scale": 128**-0.5,
    }
    if prefill:
        values["seq_lens"] = torch.tensor([20, 33 + seed, 10], dtype=torch.int32).cuda()
        values["block_table"] = values["block_table"][:3].contiguous()
        values["query_start_loc"] = torch.tensor([0, 4, 5, 8], dtype=torch.int32).cuda()
        values["max_query_len"], values["max_seq_len"] = 4, 33 + seed
    return Call(None, (), values)


def _calls(op: str, prefill: bool = False) -> list[Call]:
    """CALLS calls of the same shapes on the same layer and caches, fresh activations each."""
    if op == "paged_attention":
        first = _decodes(0, None, prefill)
        caches = (first.kwargs["key_cache"], first.kwargs["value_cache"])
        return [first, *(_decodes(seed, caches, prefill) for seed in range(1, CALLS))]
    case = bench_cases(op)[0]
    tokens = case.fixed_tokens or 3
    first = case.build(tokens, torch.bfloat16, "cuda", seed=0)
    names = CHECKS[op]["args"]
    caches = set(CHECKS[op].get("cache", ()))

    def named(call: Call) -> dict:
        return dict(call.kwargs) if call.kwargs else dict(zip(names, call.args))

    kept = {k: v for k, v in named(first).items() if k in caches}
    calls = [first]
    for seed in range(1, CALLS):
        fresh = case.arguments(tokens, torch.bfloat16, "cuda", seed=seed)
        values = {**named(fresh), **kept}
        calls.append(case.call(first.layer, values))
    return calls


def _impl(op: str):
    impls = get_default_manager().registry.get_implementations(op)
    flagos = [i for i in impls if i.impl_id == "default.flagos" and i.is_available()]
    if flagos:
        return flagos[0]
    reference = next(i for i in impls if i.kind is BackendImplKind.REFERENCE)
    return dataclasses.replace(reference, kind=BackendImplKind.VENDOR, vendor="as-vendor")


def _report(
    op: str, impl, replay: bool, bias: float = 0.0, prefill: bool = False
) -> tuple[list[tuple], Verifier]:
    verifier = Verifier(ops=True, replay=replay)
    if bias:
        fn = impl.fn

        def wrong(*args, **kwargs):
            out = fn(*args, **kwargs)
            return out + bias if isinstance(out, torch.Tensor) else out

        impl = dataclasses.replace(impl, fn=wrong)
    verified = verifier.wrap(op, impl, get_default_manager().registry)
    for call in _calls(op, prefill):
        call.bind(verified)()
    torch.cuda.synchronize()
    rows = verifier.recorder.to_json()["rows"]
    return (
        sorted(
            (
                r["site"],
                r["shapes"],
                r["calls"],
                r["exceeded"],
                r["unverified"],
                r["max_abs"],
                r["ratio"],
            )
            for r in rows
        ),
        verifier,
    )


@pytest.mark.parametrize("op", OPS)
def test_replayed_checks_report_what_eager_checks_report(op):
    impl = _impl(op)
    eager, _ = _report(op, impl, replay=False)
    replayed, verifier = _report(op, impl, replay=True)
    assert [row[:5] for row in replayed] == [row[:5] for row in eager]
    for got, want in zip(replayed, eager):
        assert got[5] == pytest.approx(want[5], rel=1e-6, abs=1e-9)
        assert got[6] == pytest.approx(want[6], rel=1e-6, abs=1e-9)
    assert sum(row[2] for row in eager) == CALLS
    # recorded at the second call, replayed from then on
    assert verifier.replays.recorded >= 1, verifier.replays.refused


def test_a_wrong_kernel_is_over_tolerance_on_every_replayed_call():
    impl = _impl("silu_and_mul")
    rows, verifier = _report("silu_and_mul", impl, replay=True, bias=0.5)
    assert verifier.replays.recorded == 1
    assert sum(row[2] for row in rows) == CALLS
    assert sum(row[3] for row in rows) == CALLS


def test_references_that_read_back_replay_the_comparison_alone():
    """A prefill's attention reference reads the lengths back to the host: its check is refused
    as a whole and its comparison recorded, with what the eager checks report."""
    impl = _impl("paged_attention")
    eager, _ = _report("paged_attention", impl, replay=False, prefill=True)
    replayed, verifier = _report("paged_attention", impl, replay=True, prefill=True)
    assert ("paged_attention", "check") in verifier.replays.refused
    assert verifier.replays.recorded == 1
    assert [row[:5] for row in replayed] == [row[:5] for row in eager]


def test_a_cache_writes_check_is_recorded_whole():
    """The cache write's reference reads nothing back (``store_slots``): its whole check is
    recorded at the second call and replayed."""
    _, verifier = _report("reshape_and_cache_flash", _impl("reshape_and_cache_flash"), True)
    assert not verifier.replays.refused
    assert verifier.replays.recorded == 1

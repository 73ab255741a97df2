"""The harness of the generated collectives' tests (``vllm_fl.testing.collectives``) on impls
that break the contract (tests/support/broken_collectives.py), all in one spawn of 2 ranks:
each failure is reported per rank with what went wrong, an unavailable impl is never run, a
rank raising alone leaves the rest runnable on new groups, and a crashing rank fails the item it
ran and those it never reached, without a hang."""

from __future__ import annotations

import pytest

from codegen.manifest.targets import TESTED_COLLECTIVES
from tests.support.broken_collectives import IMPL
from vllm_fl.testing.collectives import ORACLES, run_collectives

TOLERANCES = {"float32": {"atol": 1e-5, "rtol": 1e-5}}
ROWS = {"id": "rows", "args": {"input_": {"shape": (4, 3), "dtype": "$dtype"}}}
ONE_ROW = {"id": "one-row", "args": {"input_": {"shape": (1, 3), "dtype": "$dtype"}}}
GATHER = {
    "id": "to-1",
    "args": {
        "input_": {"shape": (2, 3), "dtype": "$dtype"},
        "dst": {"value": 1},
        "dim": {"value": 0},
    },
}

#: vLLM's dispatch: a list of tensors, rank 0 holding 3 rows and rank 1 two
UNEVEN_LIST = {
    "id": "uneven-list",
    "args": {
        "input_": {
            "per_rank": (
                {
                    "tensors": (
                        {"shape": (3, 2), "dtype": "$dtype"},
                        {"shape": (3,), "dtype": "$dtype"},
                    )
                },
                {
                    "tensors": (
                        {"shape": (2, 2), "dtype": "$dtype"},
                        {"shape": (2,), "dtype": "$dtype"},
                    )
                },
            )
        },
        "dim": {"value": 0},
        "sizes": {"value": (3, 2)},
    },
}


def _entry(method: str, *cases: dict, impls: tuple[str, ...] = (IMPL,)) -> dict:
    return {"method": method, "impls": list(impls), "tolerances": TOLERANCES, "cases": list(cases)}


SPEC = {
    # the reference in the same run: right, and its neighbours' failures do not touch it
    "all_reduce": _entry("all_reduce", ROWS, impls=("reference.torch",)),
    "off_by_one": _entry("all_reduce", ROWS),
    "in_place": _entry("all_reduce", ROWS),
    "gather_everywhere": _entry("gather", GATHER),
    "one_sided": _entry("all_reduce", ONE_ROW, ROWS),
    "unavailable": _entry("all_reduce", ROWS),
    "missing": _entry("all_reduce", ROWS),
    "with_state": _entry("all_reduce", ROWS),
    "on_another_communicator": _entry("all_reduce", ROWS),
    "all_gatherv": _entry("all_gatherv", UNEVEN_LIST, impls=("reference.torch",)),
    "gatherv_first": _entry("all_gatherv", UNEVEN_LIST),
    "gatherv_in_place_rows": _entry("all_gatherv", UNEVEN_LIST),
    # last: the crash ends the run
    "crash": _entry("all_reduce", ROWS, ONE_ROW),
}


@pytest.fixture(scope="module")
def results():
    return run_collectives(
        SPEC,
        timeout=240,
        prepare="tests.support.broken_collectives:register",
        collective_timeout=5,
    )


def _outcome(results, op, case="rows"):
    impl = "reference.torch" if op in ("all_reduce", "all_gatherv") else IMPL
    return results[op, impl, "float32", case]


def test_the_oracles_cover_the_methods_the_manifest_may_test():
    assert set(ORACLES) == set(TESTED_COLLECTIVES)


def test_a_right_impl_passes_on_every_rank(results):
    outcome = _outcome(results, "all_reduce")
    assert outcome.ok, outcome.failure
    assert sorted(outcome.ranks) == [0, 1]
    assert all(r.max_error == 0.0 for r in outcome.ranks.values())


def test_a_wrong_value_fails_with_its_error(results):
    outcome = _outcome(results, "off_by_one")
    assert not outcome.ok
    assert all(r.status == "failed" for r in outcome.ranks.values())
    assert all(r.max_error == pytest.approx(1.0) for r in outcome.ranks.values())
    assert "beyond atol" in outcome.failure


def test_an_impl_modifying_its_input_fails(results):
    outcome = _outcome(results, "in_place")
    assert {r.error for r in outcome.ranks.values()} == {"modified its input argument(s) 0"}


def test_a_tensor_where_none_is_due_fails_on_that_rank(results):
    outcome = _outcome(results, "gather_everywhere", "to-1")
    assert outcome.ranks[1].status == "ok"
    assert outcome.ranks[0].status == "failed"
    assert "expected None" in outcome.ranks[0].error


def test_a_rank_raising_alone_fails_that_case_and_the_next_runs(results):
    raised = _outcome(results, "one_sided", "one-row")
    assert "rank 1 gives up" in raised.ranks[1].error
    assert raised.ranks[0].status == "failed"  # its all-reduce timed out
    after = _outcome(results, "one_sided")
    assert after.ok, after.failure


def test_an_unavailable_impl_is_skipped_with_its_reason(results):
    outcome = _outcome(results, "unavailable")
    assert outcome.skip_reason == f"{IMPL} (unavailable): never here"


def test_an_unregistered_impl_fails(results):
    outcome = _outcome(results, "missing")
    assert outcome.skip_reason is None and not outcome.ok
    assert f"no impl {IMPL!r} of op 'missing' is registered" in outcome.failure


def test_the_backend_hook_runs_on_the_stand_in_before_the_impl(results):
    outcome = _outcome(results, "with_state")
    assert outcome.ok, outcome.failure


def test_a_backend_refusing_the_communicator_is_skipped_not_run(results):
    # off_by_one behind the refusing hook: run, it would fail
    outcome = _outcome(results, "on_another_communicator")
    assert outcome.skip_reason is not None, outcome.failure
    assert "needs another communicator than GroupStandIn" in outcome.skip_reason


def test_a_crashing_rank_fails_what_it_ran_and_what_it_never_reached(results):
    ran = _outcome(results, "crash")
    assert ran.ranks[1].error.startswith("rank 1 exited with code 3 while running op 'crash'")
    never = _outcome(results, "crash", "one-row")
    assert never.ranks[1].error.startswith("not run: rank 1 exited with code 3 while running")
    assert not never.ok


def test_a_list_of_uneven_tensors_gathers_on_the_reference(results):
    outcome = _outcome(results, "all_gatherv", "uneven-list")
    assert outcome.ok, outcome.failure
    assert all(r.max_error == 0.0 for r in outcome.ranks.values())


def test_a_tensor_where_a_list_is_due_fails(results):
    outcome = _outcome(results, "gatherv_first", "uneven-list")
    assert all(r.status == "failed" for r in outcome.ranks.values())
    assert "expected a list of 2 tensors" in outcome.failure


def test_an_impl_modifying_a_tensor_of_its_list_input_fails(results):
    outcome = _outcome(results, "gatherv_in_place_rows", "uneven-list")
    assert {r.error for r in outcome.ranks.values()} == {"modified its input argument(s) 0"}

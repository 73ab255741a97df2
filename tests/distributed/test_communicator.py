"""``CommunicatorFL`` on a real two-rank gloo group: the collectives go to the reference; ranks
that select different implementations refuse to start, naming the ranks and the impls."""

from __future__ import annotations

import json

import pytest
import torch.multiprocessing as mp

from tests.support.communicator_ranks import rank_main

pytest.importorskip("vllm.distributed.device_communicators.base_device_communicator")

WORLD = 2


def _run(tmp_path, scenario: str) -> list[dict]:
    store, out = tmp_path / "store", tmp_path / "report"
    mp.start_processes(
        rank_main,
        args=(WORLD, str(store), str(out), scenario),
        nprocs=WORLD,
        join=True,
        start_method="spawn",
    )
    return [json.loads((tmp_path / f"report-{rank}").read_text()) for rank in range(WORLD)]


def test_collectives_run_on_the_reference_across_two_ranks(tmp_path):
    reports = _run(tmp_path, "agree")
    for report in reports:
        assert report["outcome"] == "ok", report
        assert report["all_reduce"] == [3.0, 3.0, 3.0]
        assert report["input_kept"]
        assert report["gathered"] == [0, 1]
        assert report["impls"] == ["vllm_fl.backends.reference.impl.collectives"]
    assert reports[1]["received"] == [0.0, 3.0, 6.0, 9.0]


def test_ranks_that_select_different_impls_refuse_to_start(tmp_path):
    reports = _run(tmp_path, "disagree")
    for report in reports:
        assert report["outcome"] == "DispatchError", report
        message = report["message"]
        assert "process group 'tp:0'" in message
        assert "rank 0: all_reduce=reference.torch" in message
        assert "rank 1: all_reduce=vendor.fake" in message

"""MoE expert parallelism under data parallelism on the plugin's communicator: vLLM's process
groups on two gloo ranks (data parallel 2, expert parallel), where vLLM builds every group's
communicator from ``CommunicatorFL``. The expert-parallel group gets vLLM's all-gather /
reduce-scatter all2all manager, whose dispatch and combine move uneven token counts through the
dispatched ``all_gatherv`` and ``reduce_scatterv``; an all2all backend with kernels of its own
stops the start-up naming it and what is supported."""

from __future__ import annotations

import json

import pytest
import torch
import torch.multiprocessing as mp

from tests.support.all2all_ranks import TOKENS, inputs, rank_main

pytest.importorskip("vllm.distributed.device_communicators.all2all")

WORLD = 2


def _run(tmp_path, all2all_backend: str) -> list[dict]:
    store, out = tmp_path / "store", tmp_path / "report"
    mp.start_processes(
        rank_main,
        args=(WORLD, str(store), str(out), all2all_backend),
        nprocs=WORLD,
        join=True,
        start_method="spawn",
    )
    return [json.loads((tmp_path / f"report-{rank}").read_text()) for rank in range(WORLD)]


def _every_rank(name: str) -> list:
    """Every rank's tensor ``name`` concatenated in rank order: what a dispatch gives."""
    return torch.cat([inputs(rank)[name] for rank in range(WORLD)]).tolist()


def test_dispatch_and_combine_move_uneven_tokens_through_the_collectives(tmp_path):
    reports = _run(tmp_path, "allgather_reducescatter")
    for rank, report in enumerate(reports):
        assert report["outcome"] == "ok", report
        assert report["ep_communicator"] == "CommunicatorFL"
        assert report["ep_manager"] == "AgRsAll2AllManager"
        # only the expert-parallel group moves tokens
        assert report["dp_manager"] == "NoneType"
        assert report["router_hidden"] == _every_rank("hidden")
        assert report["router_logits"] == _every_rank("logits")
        assert report["hidden"] == _every_rank("hidden")
        assert report["weights"] == _every_rank("weights")
        assert report["ids"] == _every_rank("ids")
        assert report["ids_dtype"] == "torch.int32"
        # shares 1x and 2x of every token, summed: 3x this rank's own tokens, in its order
        assert len(report["combined"]) == TOKENS[rank]
        assert report["combined"] == (inputs(rank)["hidden"] * 3).tolist()


def test_an_all2all_backend_with_kernels_of_its_own_stops_the_start_up(tmp_path):
    reports = _run(tmp_path, "deepep_low_latency")
    for report in reports:
        assert report["outcome"] == "DispatchError", report
        message = report["message"]
        assert "process group 'ep:0'" in message
        assert "'deepep_low_latency'" in message
        assert "Supported: 'allgather_reducescatter' or 'naive'" in message

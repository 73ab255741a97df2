"""The ranks of ``tests/distributed``: each a spawned process on a two-rank gloo group that
builds the plugin's ``CommunicatorFL`` as vLLM would and reports what happened in a file."""

from __future__ import annotations

import json
import traceback
from pathlib import Path


def _init(rank: int, world: int, store: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)


def _communicator():
    import torch
    import torch.distributed as dist

    from vllm_fl.distributed.communicator import CommunicatorFL

    group = dist.group.WORLD
    return CommunicatorFL(
        cpu_group=group, device=torch.device("cpu"), device_group=group, unique_name="tp:0"
    )


def _fake_impl(self, input_):
    raise RuntimeError("the fake all_reduce of rank 1 failed")


def _register_on_rank_one(rank: int) -> None:
    """Rank 1 alone gets a second all_reduce impl, preferred to the reference."""
    if rank != 1:
        return
    from vllm_fl.dispatch import BackendImplKind, OpImpl, get_default_manager

    get_default_manager().registry.register_impl(
        OpImpl("all_reduce", "vendor.fake", BackendImplKind.VENDOR, _fake_impl, "fake", 500)
    )


def rank_main(rank: int, world: int, store: str, out: str, scenario: str) -> None:
    """Run ``scenario`` as rank ``rank``; write ``{"rank", "outcome", ...}`` to ``out``-<rank>."""
    report: dict = {"rank": rank}
    try:
        _init(rank, world, store)
        import torch

        if scenario == "disagree":
            _register_on_rank_one(rank)
        comm = _communicator()
        x = torch.full((3,), float(rank + 1))
        before = x.clone()
        report["all_reduce"] = comm.all_reduce(x).tolist()
        report["input_kept"] = bool(torch.equal(x, before))
        report["gathered"] = comm.all_gather(torch.tensor([[rank]]), dim=0).flatten().tolist()
        if rank == 0:
            comm.send(torch.arange(4.0) * 3, dst=1)
        else:
            report["received"] = comm.recv([4], torch.float32, src=0).tolist()
        report["impls"] = sorted({f.__module__ for f in comm.collective_impls.values()})
        report["outcome"] = "ok"
    except Exception as exc:  # noqa: BLE001 - the report says what happened
        report["outcome"] = type(exc).__name__
        report["message"] = str(exc)
        report["traceback"] = traceback.format_exc()[-2000:]
    Path(f"{out}-{rank}").write_text(json.dumps(report))

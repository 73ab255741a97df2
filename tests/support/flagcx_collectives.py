"""Each FlagCX collective the binding wraps, run by several processes on their own GPUs and
compared with torch.distributed NCCL's result for the same inputs.

Used by ``tests/backends/test_flagcx_library.py`` and by a stand-alone check script on a GPU
machine (``run`` prints nothing; ``report`` formats its rows).
"""

from __future__ import annotations

import datetime
import os
import socket
from dataclasses import dataclass
from typing import Any, Callable

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv")
DTYPES = ("bfloat16", "float32")
#: elements per rank: odd, so no collective gets a size that happens to be aligned
NUMEL = 3 * 4096 + 5
#: the largest difference from NCCL's result that passes, by dtype: one rounding step at the
#: largest magnitude these inputs reach (below 32: a bf16 step is 0.125 there). Moves are exact,
#: and two ranks' sums round alike whatever NCCL's algorithm, so any difference is suspect.
TOLERANCE = {"bfloat16": 0.125, "float32": 1e-5}


@dataclass(frozen=True)
class Row:
    """One collective in one dtype: the largest absolute difference over every rank."""

    collective: str
    dtype: str
    max_abs_diff: float

    @property
    def passed(self) -> bool:
        return self.max_abs_diff <= TOLERANCE[self.dtype]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(flagcx_path: str, world_size: int = 2) -> list[Row]:
    """Spawn ``world_size`` processes (rank r on ``cuda:r``) and return one row per collective
    and dtype, in ``COLLECTIVES`` x ``DTYPES`` order."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    port = _free_port()
    mp.start_processes(
        _rank_main,
        args=(world_size, port, flagcx_path, queue),
        nprocs=world_size,
        start_method="spawn",
    )
    return queue.get()


def report(rows: list[Row]) -> str:
    """One line per row and a last line PASS or FAIL."""
    lines = [
        f"{row.collective:<15} {row.dtype:<9} max|flagcx - nccl| = {row.max_abs_diff:.3g}"
        f"  {'ok' if row.passed else 'MISMATCH'}"
        for row in rows
    ]
    lines.append("PASS" if rows and all(row.passed for row in rows) else "FAIL")
    return "\n".join(lines)


def _rank_main(rank: int, world_size: int, port: int, flagcx_path: str, queue: Any) -> None:
    import torch
    import torch.distributed as dist

    from vllm_fl.backends.flagcx.library import FlagcxLibrary

    torch.cuda.set_device(rank)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    timeout = datetime.timedelta(seconds=180)  # a hung rank fails the run instead of stalling it
    dist.init_process_group("nccl", rank=rank, world_size=world_size, timeout=timeout)
    lib = FlagcxLibrary.load(flagcx_path)
    holder = [lib.unique_id() if rank == 0 else None]
    dist.broadcast_object_list(holder, src=0)
    comm = lib.init_comm(world_size, rank, holder[0])
    side = torch.cuda.Stream()  # FlagCX runs on a stream of its own, as in an engine
    rows = []
    for name in COLLECTIVES:
        for dtype_name in DTYPES:
            dtype = getattr(torch, dtype_name)
            generator = torch.Generator(device="cuda").manual_seed(1000 + rank)
            x = torch.randn(NUMEL, device="cuda", dtype=dtype, generator=generator)
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                got = _CASES[name](lib, comm, x, side)
            torch.cuda.current_stream().wait_stream(side)
            expected = _EXPECTED[name](dist, x)
            diff = (got.float() - expected.float()).abs().max().reshape(1)
            dist.all_reduce(diff, op=dist.ReduceOp.MAX)
            rows.append(Row(name, dtype_name, diff.item()))
    lib.destroy_comm(comm)
    lib.close()
    dist.destroy_process_group()
    if rank == 0:
        queue.put(rows)


def _flagcx_all_reduce(lib, comm, x, stream):
    out = x.new_empty(x.shape)
    lib.all_reduce(comm, x, out, stream)
    return out


def _flagcx_all_gather(lib, comm, x, stream):
    out = x.new_empty(x.numel() * comm.world_size)
    lib.all_gather(comm, x, out, stream)
    return out


def _scatter_input(x, world_size: int):
    """``world_size`` blocks, block i being ``x * (i + 1)``, so that each rank's block differs."""
    scale = 1 + x.new_tensor(range(world_size)).repeat_interleave(x.numel())
    return x.repeat(world_size) * scale


def _flagcx_reduce_scatter(lib, comm, x, stream):
    out = x.new_empty(x.shape)
    lib.reduce_scatter(comm, _scatter_input(x, comm.world_size), out, stream)
    return out


def _flagcx_broadcast(lib, comm, x, stream):
    out = x.new_empty(x.shape)
    lib.broadcast(comm, x, out, root=0, stream=stream)
    return out


def _flagcx_send_recv(lib, comm, x, stream):
    """Each rank sends to the next and receives from the previous, in one group."""
    out = x.new_empty(x.shape)
    with lib.group(comm):
        lib.send(comm, x, (comm.rank + 1) % comm.world_size, stream)
        lib.recv(comm, out, (comm.rank - 1) % comm.world_size, stream)
    return out


def _nccl_all_gather(dist, x):
    out = x.new_empty(x.numel() * dist.get_world_size())
    dist.all_gather_into_tensor(out, x)
    return out


def _nccl_all_reduce(dist, x):
    out = x.clone()
    dist.all_reduce(out)
    return out


def _nccl_reduce_scatter(dist, x):
    out = x.new_empty(x.shape)
    dist.reduce_scatter_tensor(out, _scatter_input(x, dist.get_world_size()))
    return out


def _nccl_broadcast(dist, x):
    out = x.clone()
    dist.broadcast(out, src=0)
    return out


def _nccl_send_recv(dist, x):
    """The previous rank's ``x``, by torch's all-gather."""
    world_size = dist.get_world_size()
    return _nccl_all_gather(dist, x).view(world_size, -1)[(dist.get_rank() - 1) % world_size]


_CASES: dict[str, Callable[..., Any]] = {
    "all_reduce": _flagcx_all_reduce,
    "all_gather": _flagcx_all_gather,
    "reduce_scatter": _flagcx_reduce_scatter,
    "broadcast": _flagcx_broadcast,
    "send_recv": _flagcx_send_recv,
}
_EXPECTED: dict[str, Callable[..., Any]] = {
    "all_reduce": _nccl_all_reduce,
    "all_gather": _nccl_all_gather,
    "reduce_scatter": _nccl_reduce_scatter,
    "broadcast": _nccl_broadcast,
    "send_recv": _nccl_send_recv,
}

"""Parity of the collectives on several CPU processes over gloo: the machinery of the generated
``tests/generated/test_collectives.py``, whose ``SPEC`` ops.yaml writes.

``run_collectives(spec)`` spawns ``world_size`` processes once for the whole spec (the spawn
context: the caller needs no ``__main__`` guard), each a rank of a gloo group on the CPU. For
each op of the spec and each impl id it lists, every rank looks the impl up in the default
manager's registry and the ranks agree on whether it can run: unavailable on any rank, it is
recorded with the reason and never run (one rank alone in a collective would wait for the
others). The impl's backend's ``communicator_setup`` hook, if it has one, runs once on a
``GroupStandIn``, the attributes of vLLM's communicator the impls read. Then for each dtype x
case every rank draws its inputs from a seed of (op, case index, dtype, rank), so each can draw
every rank's too, calls the impl and compares its result with ``ORACLES[method]`` of all the
ranks' inputs, computed locally in the tested dtype (with 2 ranks, a sum is exact); the impl
must return the declared kind (a tensor, a list of them, or None), no tensor sharing memory
with an input, and leave its inputs alone. ``send`` runs with the ``recv`` of the same impl id: rank 0 sends its
tensor, the receiving rank (``dst``, the next rank without one) must get it.

A spec entry (what ``codegen.dest.collective_tests`` writes)::

    "all_gather": {
        "method": "all_gather",             # the communicator method the op replaces
        "impls": ["reference.torch", ...],  # impl ids, reference first
        "tolerances": {"float32": {"atol": 1e-05, "rtol": 1.3e-06}, ...},
        "cases": [{"id": "case0-...", "args": {"input_": {"shape": (3, 5), "dtype": "$dtype"},
                                               "dim": {"value": 0}}}],
        # send only: the op replacing recv, "receiver": "recv"
    }

Every argument of the signature is in ``args``, in order (the positional arguments of vLLM's
method): a tensor ``{shape, dtype, high, scale}`` or ``{values, dtype}`` (``$dtype``: the dtype
under test), a list of tensors ``{tensors: [tensor, ...]}``, a literal ``{value}``, or
``{per_rank: [rank 0's, rank 1's, ...]}`` (one of the others per rank: an uneven collective's
rank r holds ``sizes[r]`` rows). A method may return a tensor, None or a list of tensors (where
vLLM's does: ``all_gatherv`` of a list); a list is compared element by element.

The ranks report each result to the parent as they go, over a pipe each (written synchronously:
what a rank wrote before it died is read). A rank that crashes, or a
run past ``timeout``, fails the item each rank was running and every item it never reached,
naming what ran; the processes are then killed, never waited on. A collective one rank never
enters raises on the others after the group's gloo timeout (``COLLECTIVE_TIMEOUT``), and the
ranks run the rest on new groups.
"""

from __future__ import annotations

import importlib
import os
import tempfile
import time
import traceback
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from multiprocessing.connection import Connection, wait

from vllm_fl.dispatch import CommunicatorUnsupported
from vllm_fl.testing.inputs import draw_tensor

__all__ = [
    "COLLECTIVE_TIMEOUT",
    "GroupStandIn",
    "ORACLES",
    "Outcome",
    "RankResult",
    "draw_arguments",
    "run_collectives",
]

#: seconds a collective of a test group waits for the other ranks before it raises
COLLECTIVE_TIMEOUT = 30.0
#: seconds the parent still reads the other ranks' results after one rank crashed
CRASH_GRACE = 3.0
#: the most characters of a traceback kept in a result (its tail)
ERROR_TAIL = 2000

#: (op, impl id, dtype, case id): one test of the spec
Key = tuple[str, str, str, str]
#: the arguments of one call, in signature order
Arguments = list[Any]


@dataclass(frozen=True)
class RankResult:
    """What one rank saw of one test: ``ok``, ``failed`` (``error`` says why) or
    ``unavailable`` (``error`` holds the impl's reason); ``max_error``: the largest absolute
    difference from the oracle, when a tensor was compared."""

    status: str
    max_error: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class Outcome:
    """Every rank's result of one test."""

    ranks: dict[int, RankResult]

    @property
    def skip_reason(self) -> str | None:
        """Why the impl did not run (unavailable), or None."""
        for result in self.ranks.values():
            if result.status == "unavailable":
                return result.error
        return None

    @property
    def ok(self) -> bool:
        return bool(self.ranks) and all(r.status == "ok" for r in self.ranks.values())

    @property
    def failure(self) -> str:
        """Each failing rank's error, one paragraph per rank."""
        return "\n".join(
            f"rank {rank}: {result.error} (max error {result.max_error})"
            for rank, result in sorted(self.ranks.items())
            if result.status != "ok"
        )


class GroupStandIn:
    """What a collective impl reads of vLLM's communicator (``CommunicatorFL``), on groups of
    its own: ``cpu_group``, ``device_group``, ``device``, ``world_size``, ``rank_in_group``,
    ``ranks`` (the group's global ranks), ``unique_name``, ``backend_state`` (backend name ->
    what its ``communicator_setup`` hook returned) and ``broadcast_object``."""

    def __init__(
        self,
        cpu_group: Any,
        device_group: Any,
        unique_name: str,
        device: torch.device | None = None,
    ) -> None:
        self.cpu_group = cpu_group
        self.device_group = device_group
        self.device = device if device is not None else torch.device("cpu")
        self.ranks: list[int] = dist.get_process_group_ranks(device_group)
        self.world_size = len(self.ranks)
        self.rank_in_group = self.ranks.index(dist.get_rank())
        self.unique_name = unique_name
        self.backend_state: dict[str, object] = {}

    def broadcast_object(self, obj: object, src: int = 0) -> Any:
        """``obj`` of rank ``src`` of the group, on every rank, over the CPU group."""
        box = [obj]
        dist.broadcast_object_list(box, src=self.ranks[src], group=self.cpu_group)
        return box[0]


# -- oracles: what each method returns on ``rank``, from every rank's arguments ----------------


def _sum(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """The sum in rank order, in the tensors' dtype."""
    total = tensors[0].clone()
    for tensor in tensors[1:]:
        total = total + tensor
    return total


def _all_reduce(args: Sequence[Arguments], rank: int) -> torch.Tensor:
    return _sum([a[0] for a in args])


def _all_gather(args: Sequence[Arguments], rank: int) -> torch.Tensor:
    return torch.cat([a[0] for a in args], dim=args[rank][1])


def _reduce_scatter(args: Sequence[Arguments], rank: int) -> torch.Tensor:
    total, dim = _sum([a[0] for a in args]), args[rank][1]
    size = total.shape[dim] // len(args)
    return total.narrow(dim, rank * size, size)


def _reduce_scatterv(args: Sequence[Arguments], rank: int) -> torch.Tensor:
    sizes = args[rank][2]
    if sizes is None:
        return _reduce_scatter(args, rank)
    total, dim = _sum([a[0] for a in args]), args[rank][1]
    return total.narrow(dim, sum(sizes[:rank]), sizes[rank])


def _all_gatherv(args: Sequence[Arguments], rank: int) -> torch.Tensor | list[torch.Tensor]:
    """Each rank's tensor(s) concatenated along dim in rank order (rank r's holding sizes[r] of
    it, which each rank's input already has): a tensor for a tensor, a list for a list."""
    dim = args[rank][1]
    if isinstance(args[rank][0], torch.Tensor):
        return torch.cat([a[0] for a in args], dim=dim)
    return [torch.cat(parts, dim=dim) for parts in zip(*(a[0] for a in args))]


def _gather(args: Sequence[Arguments], rank: int) -> torch.Tensor | None:
    _, dst, dim = args[rank]
    return torch.cat([a[0] for a in args], dim=dim) if rank == dst else None


def _send(args: Sequence[Arguments], rank: int) -> torch.Tensor | None:
    """Rank 0 sends (``send`` returns None); the receiver's ``recv`` returns rank 0's tensor."""
    return args[0][0] if rank == _receiver(args, len(args)) else None


#: communicator method -> its result on a rank from every rank's arguments (positional, in the
#: order of vLLM's method); codegen.manifest.targets.TESTED_COLLECTIVES lists the same methods
ORACLES: dict[
    str, Callable[[Sequence[Arguments], int], torch.Tensor | list[torch.Tensor] | None]
] = {
    "all_reduce": _all_reduce,
    "all_gather": _all_gather,
    "all_gatherv": _all_gatherv,
    "reduce_scatter": _reduce_scatter,
    "reduce_scatterv": _reduce_scatterv,
    "gather": _gather,
    "send": _send,
}


def _receiver(args: Sequence[Arguments], world_size: int) -> int:
    """The rank rank 0's send goes to: its ``dst``, the next rank without one."""
    dst = args[0][1]
    return 1 % world_size if dst is None else dst


# -- inputs ----------------------------------------------------------------------------------


def seed_of(seed: int, op: str, case_index: int, dtype: str, rank: int) -> int:
    """The seed of one rank's inputs of one case in one dtype."""
    return (seed + zlib.crc32(f"{op}/{case_index}/{dtype}/{rank}".encode())) % (1 << 62)


def draw_arguments(
    args: dict[str, dict[str, Any]], dtype: str, seed: int, rank: int = 0
) -> Arguments:
    """Rank ``rank``'s arguments of a case (a spec's ``args``) in ``dtype``, tensors drawn from
    ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    return [_draw(item, rank, getattr(torch, dtype), generator) for item in args.values()]


def _draw(item: dict[str, Any], rank: int, dtype: torch.dtype, generator: torch.Generator) -> Any:
    if "per_rank" in item:
        return _draw(item["per_rank"][rank], rank, dtype, generator)
    if "tensors" in item:
        return [_draw(t, rank, dtype, generator) for t in item["tensors"]]
    if "value" in item:
        value = item["value"]
        return list(value) if isinstance(value, tuple) else value
    return draw_tensor(item, dtype, generator)


def _tensors(value: object) -> list[torch.Tensor]:
    """The tensors of an argument or a result: itself, or a list's elements."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, torch.Tensor)]
    return []


# -- the parent ------------------------------------------------------------------------------


def run_collectives(
    spec: dict[str, dict[str, Any]],
    world_size: int = 2,
    timeout: float = 300.0,
    seed: int = 0,
    prepare: str | None = None,
    collective_timeout: float = COLLECTIVE_TIMEOUT,
) -> dict[Key, Outcome]:
    """Run every (op, impl, dtype, case) of ``spec`` on ``world_size`` spawned CPU processes
    over gloo (see the module docstring); the outcome of each, every rank's result in it. Never
    raises for what a rank does: a crash or a hang past ``timeout`` seconds (the whole run)
    fails the items concerned.

    ``prepare``, ``"module:function"``, is called on each rank before the spec runs
    (the harness's own tests register broken impls with it). A collective one rank never
    enters raises on the others after ``collective_timeout`` seconds (at most a quarter of
    ``timeout``)."""
    keys = [
        (op, impl, dtype, case["id"])
        for op, entry in spec.items()
        for impl in entry["impls"]
        for dtype in entry["tolerances"]
        for case in entry["cases"]
    ]
    results: dict[Key, dict[int, RankResult]] = {key: {} for key in keys}
    context = mp.get_context("spawn")
    pipes = [context.Pipe(duplex=False) for _ in range(world_size)]
    collective_timeout = min(collective_timeout, timeout / 4)
    with tempfile.TemporaryDirectory(prefix="vllm_fl_collectives_") as tmp:
        store = os.path.join(tmp, "store")
        processes = [
            context.Process(
                target=_worker,
                args=(
                    rank,
                    world_size,
                    store,
                    spec,
                    seed,
                    pipes[rank][1],
                    timeout,
                    collective_timeout,
                    prepare,
                ),
                name=f"collectives-rank{rank}",
                daemon=True,
            )
            for rank in range(world_size)
        ]
        for process in processes:
            process.start()
        for _, writer in pipes:
            writer.close()  # the rank's end only: its death is the reader's end of file
        try:
            readers = [reader for reader, _ in pipes]
            running, ended = _collect(processes, readers, results, time.monotonic() + timeout)
        finally:
            for reader, _ in pipes:
                reader.close()
            for process in processes:
                if process.is_alive():
                    process.kill()
                process.join(10)
    for key in keys:
        for rank in range(world_size):
            if rank not in results[key]:
                results[key][rank] = RankResult(
                    "failed", error=_missing(key, rank, running[rank], ended.get(rank), timeout)
                )
    return {key: Outcome(results[key]) for key in keys}


def _collect(
    processes: list[Any],
    readers: list[Connection],
    results: dict[Key, dict[int, RankResult]],
    deadline: float,
) -> tuple[dict[int, tuple[Key | None, str] | None], dict[int, str | None]]:
    """Read the ranks' messages into ``results`` until every rank ended or ``deadline`` (soon
    after a rank crashed: the others wait for it in vain); returns what each rank was running
    last and how each ended (None: done; else why not)."""
    running: dict[int, tuple[Key | None, str] | None] = {r: None for r in range(len(processes))}
    ended: dict[int, str | None] = {}
    open_readers = {reader: rank for rank, reader in enumerate(readers)}
    while open_readers:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        for reader in wait(list(open_readers), timeout=left):
            assert isinstance(reader, Connection)
            rank = open_readers[reader]
            try:
                kind, payload = reader.recv()
            except (EOFError, OSError):  # the rank is gone
                del open_readers[reader]
                if rank not in ended:
                    processes[rank].join(5)
                    ended[rank] = f"exited with code {processes[rank].exitcode}"
                continue
            if kind == "running":
                running[rank] = payload
            elif kind == "result":
                key, result = payload
                results[key][rank] = result
            elif kind == "done":
                ended[rank] = None
            else:  # "crashed"
                ended[rank] = f"crashed: {payload}"
        if any(how is not None for how in ended.values()):
            deadline = min(deadline, time.monotonic() + CRASH_GRACE)
    return running, ended


def _label(key: Key) -> str:
    op, impl, dtype, case = key
    return f"op {op!r}, impl {impl!r}, {dtype}, {case}"


def _missing(
    key: Key,
    rank: int,
    running: tuple[Key | None, str] | None,
    ended: str | None,
    timeout: float,
) -> str:
    """Why ``rank`` has no result for ``key``."""
    how = f"timed out after {timeout:.0f} s" if ended is None else ended
    if running is None:
        return f"rank {rank} {how} before running any collective"
    running_key, label = running
    if running_key == key:
        return f"rank {rank} {how} while running {label}"
    return f"not run: rank {rank} {how} while running {label}"


# -- a rank ----------------------------------------------------------------------------------


def _tail(text: str) -> str:
    return text if len(text) <= ERROR_TAIL else "..." + text[-ERROR_TAIL:]


def _worker(
    rank: int,
    world_size: int,
    store: str,
    spec: dict[str, dict[str, Any]],
    seed: int,
    messages: Connection,
    timeout: float,
    collective_timeout: float,
    prepare: str | None,
) -> None:
    """One rank (the target of the spawned processes: module level, so spawn finds it)."""
    try:
        torch.set_num_threads(1)
        if prepare is not None:
            module, _, function = prepare.partition(":")
            getattr(importlib.import_module(module), function)()
        dist.init_process_group(
            "gloo",
            store=dist.FileStore(store, world_size),
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=timeout),
        )
        try:
            _Rank(rank, world_size, seed, messages, collective_timeout).run(spec)
        finally:
            dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 - every failure goes to the parent
        messages.send(("crashed", _tail(traceback.format_exc())))
    else:
        messages.send(("done", None))


class _Rank:
    """One rank running the spec: the default group carries the ranks' agreements; each impl
    id runs on groups of its own (a ``GroupStandIn``, its backend's ``communicator_setup`` run
    once on it; new ones after a rank raised)."""

    def __init__(
        self,
        rank: int,
        world_size: int,
        seed: int,
        messages: Connection,
        collective_timeout: float,
    ) -> None:
        from vllm_fl.dispatch import get_default_manager

        self.rank = rank
        self.world_size = world_size
        self.seed = seed
        self.messages = messages
        self.collective_timeout = timedelta(seconds=collective_timeout)
        self.registry = get_default_manager().registry
        #: (impl id, backend name) -> its groups (the communicator of every op of the impl, as
        #: in vLLM, where one communicator serves all the collectives) and the failure of its
        #: set-up, if any
        self.groups: dict[tuple[str, str | None], tuple[GroupStandIn, RankResult | None]] = {}

    def all_gather(self, obj: object) -> list[Any]:
        """``obj`` of every rank, in rank order (over the default group)."""
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def report(self, key: Key, result: RankResult) -> None:
        self.messages.send(("result", (key, result)))

    def running(self, key: Key | None, label: str) -> None:
        self.messages.send(("running", (key, label)))

    def run(self, spec: dict[str, dict[str, Any]]) -> None:
        for op, entry in spec.items():
            for impl_id in entry["impls"]:
                self.run_impl(op, entry, impl_id)

    def run_impl(self, op: str, entry: dict[str, Any], impl_id: str) -> None:
        keys = [
            (op, impl_id, dtype, case["id"])
            for dtype in entry["tolerances"]
            for case in entry["cases"]
        ]
        self.running(None, f"op {op!r}, impl {impl_id!r}: looking it up")
        impls, status, why = self.lookup(op, entry, impl_id)
        verdict = self.agreed(status, why)
        if verdict is not None:
            for key in keys:
                self.report(key, verdict)
            return
        assert impls is not None
        backend = self.registry.backend_of(impls[0])
        owner = (impl_id, None if backend is None else backend.name)
        if owner not in self.groups:
            self.running(None, f"op {op!r}, impl {impl_id!r}: setting up its groups")
            self.groups[owner] = self.stand_in(impl_id, backend)
        group, failure = self.groups[owner]
        for index, key in enumerate(keys):
            if failure is not None:
                self.report(key, failure)
                continue
            self.running(key, _label(key))
            dtype = key[2]
            case_index = index % len(entry["cases"])
            try:
                result = self.run_case(op, entry, impls, group, dtype, case_index)
                raised = False
            except Exception:  # noqa: BLE001 - the impl's error is the test's result
                result = RankResult("failed", error=_tail(traceback.format_exc()))
                raised = True
            self.report(key, result)
            if any(self.all_gather(raised)):
                # a rank that raised may have left a collective the others entered: the groups
                # are out of step, so the rest runs on new ones
                self.running(key, _label(key) + ": setting up new groups after an error")
                self.groups[owner] = group, failure = self.stand_in(impl_id, backend)

    def lookup(
        self, op: str, entry: dict[str, Any], impl_id: str
    ) -> tuple[list[Any] | None, str, str | None]:
        """(the impls to call, "ok", None), or (None, "failed" | "unavailable", why)."""
        ops = [op] + ([entry["receiver"]] if "receiver" in entry else [])
        impls = []
        for name in ops:
            impl = self.registry.get_impl(name, impl_id)
            if impl is None:
                return None, "failed", f"no impl {impl_id!r} of op {name!r} is registered"
            ok, reason = impl.check_available()
            if not ok:
                return None, "unavailable", f"{impl_id} ({name}): {reason}"
            impls.append(impl)
        return impls, "ok", None

    def agreed(self, status: str, why: str | None) -> RankResult | None:
        """None when every rank can run the impl; else the result every rank records: failed
        before unavailable, the first rank's reason."""
        every = self.all_gather((status, why))
        for wanted in ("failed", "unavailable"):
            for rank, (other, reason) in enumerate(every):
                if other == wanted:
                    prefix = "" if all(e == every[0] for e in every) else f"on rank {rank}: "
                    return RankResult(wanted, error=prefix + str(reason))
        return None

    def stand_in(self, impl_id: str, backend: Any) -> tuple[GroupStandIn, RankResult | None]:
        """New groups for ``impl_id`` and its backend's ``communicator_setup`` run on them; a
        failed result when the hook failed on any rank."""
        ranks = list(range(self.world_size))
        cpu_group = dist.new_group(ranks, timeout=self.collective_timeout, backend="gloo")
        device_group = dist.new_group(ranks, timeout=self.collective_timeout, backend="gloo")
        group = GroupStandIn(cpu_group, device_group, f"vllm_fl-test:{impl_id}")
        error = None
        hook = getattr(backend, "communicator_setup", None)
        if hook is not None:
            try:
                group.backend_state[backend.name] = hook(group)
            except CommunicatorUnsupported as unsupported:
                # e.g. vLLM's CUDA communicator, which a stand-in group is not
                error = ("unavailable", f"{impl_id}: {unsupported}")
            except Exception:  # noqa: BLE001 - reported as the tests' failure
                error = ("failed", _tail(traceback.format_exc()))
        every = self.all_gather(error)
        for wanted in ("failed", "unavailable"):
            for rank, found in enumerate(every):
                if found is not None and found[0] == wanted:
                    return group, RankResult(
                        wanted,
                        error=f"communicator_setup of backend {backend.name!r} {wanted} on "
                        f"rank {rank}: {found[1]}",
                    )
        return group, None

    def run_case(
        self,
        op: str,
        entry: dict[str, Any],
        impls: list[Any],
        group: GroupStandIn,
        dtype: str,
        case_index: int,
    ) -> RankResult:
        """Run one case on this rank and compare with the oracle; raises what the impl raises."""
        case = entry["cases"][case_index]
        every = [
            draw_arguments(
                case["args"], dtype, seed_of(self.seed, op, case_index, dtype, rank), rank
            )
            for rank in range(self.world_size)
        ]
        mine = every[self.rank]
        before = [[t.clone() for t in _tensors(a)] for a in mine]
        expected = ORACLES[entry["method"]](every, self.rank)
        if entry["method"] == "send":
            receiver = _receiver(every, self.world_size)
            if self.rank == 0:
                result = impls[0].fn(group, *mine)
            elif self.rank == receiver:
                tensor = every[0][0]
                result = impls[1].fn(group, list(tensor.shape), tensor.dtype, 0)
            else:
                result = None
        else:
            result = impls[0].fn(group, *mine)
        changed = [
            str(i)
            for i, (a, b) in enumerate(zip(mine, before))
            if not all(torch.equal(x, y) for x, y in zip(_tensors(a), b))
        ]
        if changed:
            return RankResult(
                "failed", error=f"modified its input argument(s) {', '.join(changed)}"
            )
        tol = entry["tolerances"][dtype]
        return _compare(result, expected, mine, tol["atol"], tol["rtol"])


def _compare(
    result: object,
    expected: torch.Tensor | list[torch.Tensor] | None,
    inputs: Arguments,
    atol: float,
    rtol: float,
) -> RankResult:
    if isinstance(expected, list):
        return _compare_list(result, expected, inputs, atol, rtol)
    if expected is None:
        if result is None:
            return RankResult("ok")
        return RankResult("failed", error=f"returned {_kind(result)}, expected None")
    if not isinstance(result, torch.Tensor):
        return RankResult("failed", error=f"returned {_kind(result)}, expected a tensor")
    if result.shape != expected.shape or result.dtype != expected.dtype:
        return RankResult(
            "failed",
            error=f"returned {_kind(result)}, expected {_kind(expected)}",
        )
    for i, arg in enumerate(inputs):
        if any(
            tensor.numel()
            and result.numel()
            and result.untyped_storage().data_ptr() == tensor.untyped_storage().data_ptr()
            for tensor in _tensors(arg)
        ):
            return RankResult("failed", error=f"returned input argument {i} or a view of it")
    if not result.numel():
        return RankResult("ok", 0.0)
    got, want = result.double(), expected.double()
    max_error = (got - want).abs().max().item()
    if expected.is_floating_point():
        close = torch.allclose(got, want, atol=atol, rtol=rtol)
    else:
        close = torch.equal(result, expected)
    if close:
        return RankResult("ok", max_error)
    return RankResult(
        "failed", max_error, f"max error {max_error:.3g} beyond atol {atol}, rtol {rtol}"
    )


def _compare_list(
    result: object, expected: list[torch.Tensor], inputs: Arguments, atol: float, rtol: float
) -> RankResult:
    """A list result: a list of as many tensors, each compared as a tensor result is."""
    if not isinstance(result, list) or len(result) != len(expected):
        return RankResult(
            "failed", error=f"returned {_kind(result)}, expected a list of {len(expected)} tensors"
        )
    worst: float | None = None
    for i, (got, want) in enumerate(zip(result, expected)):
        one = _compare(got, want, inputs, atol, rtol)
        if one.max_error is not None:
            worst = max(worst or 0.0, one.max_error)
        if one.status != "ok":
            return RankResult("failed", worst, f"element {i} of the list: {one.error}")
    return RankResult("ok", worst)


def _kind(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {list(value.shape)}"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    return "None" if value is None else f"a {type(value).__name__}"

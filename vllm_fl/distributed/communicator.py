"""``CommunicatorFL``: vLLM's device communicator whose collectives are ops of the dispatch.

A collective differs from every other op in one way: all ranks of a group must run the same
implementation, or they wait for each other forever. So a collective is selected once, when vLLM
builds the communicator of a process group, from the policy in force (the same settings on every
rank), never per call; the ranks exchange their selections over the group's CPU group and refuse
to start when they differ; and a collective that raises is not retried with another
implementation on one rank: the error is the caller's.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from vllm.distributed.device_communicators.base_device_communicator import (
    DeviceCommunicatorBase,
)

from vllm_fl.dispatch import DispatchError, get_default_manager, get_logger

from .all2all import All2AllFL
from .collectives import CollectivesFL

__all__ = ["CommunicatorFL", "select_collectives"]

logger = get_logger()


def select_collectives(ops: tuple[str, ...]) -> dict[str, Any]:
    """op -> the implementation (``OpImpl``) the policy selects for it now, through the
    default manager (the start-up log names it, ``used_impls`` records it)."""
    manager = get_default_manager()
    return {op: manager.binding(op).select()[0] for op in ops}


class CommunicatorFL(CollectivesFL, All2AllFL, DeviceCommunicatorBase):
    """vLLM's ``DeviceCommunicatorBase`` with the collectives of ops.yaml (``CollectivesFL``)
    and, for MoE expert parallelism, an all2all manager over them (``All2AllFL``).

    Built by vLLM with the keyword arguments of its own communicators (``cpu_group``,
    ``device``, ``device_group``, ``unique_name``, and whatever the installed vLLM adds);
    ``init_kwargs`` keeps them for a backend's ``communicator_setup`` hook. ``backend_state``
    holds what each selected backend's hook returned."""

    def __init__(self, **init_kwargs: Any) -> None:
        self.init_kwargs = dict(init_kwargs)
        DeviceCommunicatorBase.__init__(self, **init_kwargs)
        self.backend_state: dict[str, object] = {}
        selected = select_collectives(tuple(self.COLLECTIVES.values()))
        self._check_same_on_every_rank({op: impl.impl_id for op, impl in selected.items()})
        self._set_up_backends(selected.values())
        self.collective_impls: dict[str, Callable[..., Any]] = {
            op: impl.fn for op, impl in selected.items()
        }
        self._set_up_all2all()
        manager = self.all2all_manager
        logger.info(
            "Communicator %s of group %r (rank %d of %d): %s%s",
            type(self).__name__,
            self.unique_name,
            self.rank_in_group,
            self.world_size,
            ", ".join(f"{op}={impl.impl_id}" for op, impl in selected.items()),
            "" if manager is None else f"; all2all={type(manager).__name__}",
        )

    def _all_gather_object(self, obj: Any) -> list[Any]:
        """``obj`` of every rank of the group, in rank order, over the CPU group."""
        gather = getattr(self.cpu_group, "all_gather_obj", None)
        if gather is not None:  # vLLM's StatelessProcessGroup
            return list(gather(obj))
        out: list[Any] = [None] * self.world_size
        torch.distributed.all_gather_object(out, obj, group=self.cpu_group)
        return out

    def broadcast_object(self, obj: object, src: int = 0) -> Any:
        """``obj`` of rank ``src`` of the group, on every rank, over the CPU group (for a
        backend's ``communicator_setup``: a library's unique id)."""
        broadcast = getattr(self.cpu_group, "broadcast_obj", None)
        if broadcast is not None:  # vLLM's StatelessProcessGroup
            return broadcast(obj, src=src)
        box = [obj]
        torch.distributed.broadcast_object_list(box, src=self.ranks[src], group=self.cpu_group)
        return box[0]

    def _check_same_on_every_rank(self, ids: dict[str, str]) -> None:
        """Raise ``DispatchError`` naming the ranks and their implementations when the ranks of
        the group did not select the same implementation of every collective."""
        every: list[dict[str, str]] = self._all_gather_object(ids)
        differing = sorted(op for op in ids if len({r.get(op) for r in every}) > 1)
        if not differing:
            return
        rows = "; ".join(
            f"rank {rank}: " + ", ".join(f"{op}={r.get(op)}" for op in differing)
            for rank, r in enumerate(every)
        )
        raise DispatchError(
            f"the ranks of process group {self.unique_name!r} selected different "
            f"implementations of {', '.join(differing)} ({rows}); a collective must run the "
            "same implementation on every rank. Give every rank the same VLLM_FL_* settings "
            "and the same backends (an implementation unavailable on one rank changes its "
            "selection: `python -m vllm_fl.dispatch explain` on each host shows why)"
        )

    def _set_up_backends(self, impls: Any) -> None:
        """Run the ``communicator_setup`` hook of each backend a collective selected, once, in
        the order of the collectives (the same on every rank: the hook may communicate)."""
        registry = get_default_manager().registry
        done: set[str] = set()
        for impl in impls:
            backend = registry.backend_of(impl)
            if backend is None or backend.name in done or backend.communicator_setup is None:
                continue
            done.add(backend.name)
            self.backend_state[backend.name] = backend.communicator_setup(self)

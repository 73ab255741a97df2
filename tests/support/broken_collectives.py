"""Collective impls that break the contract, one way each, for the tests of the harness
``vllm_fl.testing.collectives`` (tests/testing/test_collectives_harness.py): ``register`` is the harness's
``prepare`` hook, run on every rank; each op name below is registered with impl id ``IMPL``."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from vllm_fl.backends.reference.impl import collectives as reference
from vllm_fl.dispatch import Backend, CommunicatorUnsupported, OpImpl, get_default_manager

IMPL = "vendor.broken"
#: what the ``hooked`` backend's communicator_setup returns (broadcast from rank 0)
STATE = "state-of-rank-0"


def off_by_one(self, input_: torch.Tensor) -> torch.Tensor:
    return reference.all_reduce(self, input_) + 1


def in_place(self, input_: torch.Tensor) -> torch.Tensor:
    dist.all_reduce(input_, group=self.device_group)
    return input_.clone()


def gather_everywhere(self, input_: torch.Tensor, dst: int = 0, dim: int = -1) -> torch.Tensor:
    return reference.all_gather(self, input_, dim)


def one_sided(self, input_: torch.Tensor) -> torch.Tensor:
    """Rank 1 raises before the all-reduce on a one-row input; rank 0 waits in it."""
    if input_.shape[0] == 1 and self.rank_in_group == 1:
        raise ValueError("rank 1 gives up")
    return reference.all_reduce(self, input_)


def gatherv_first(self, input_: list[torch.Tensor], dim: int = 0, sizes=None) -> torch.Tensor:
    """Gathers only the first tensor of a list, and gives it as a tensor."""
    return reference.all_gatherv(self, input_[0], dim, sizes)


def gatherv_in_place_rows(self, input_: list[torch.Tensor], dim: int = 0, sizes=None) -> list:
    """Right, but zeroes the rows of its second input first."""
    input_[1].zero_()
    return reference.all_gatherv(self, input_, dim, sizes)


def with_state(self, input_: torch.Tensor) -> torch.Tensor:
    assert self.backend_state["hooked"] == STATE, self.backend_state
    return reference.all_reduce(self, input_)


def set_up(communicator) -> str:
    return communicator.broadcast_object(STATE if communicator.rank_in_group == 0 else None)


def refuse(communicator) -> None:
    raise CommunicatorUnsupported(f"needs another communicator than {type(communicator).__name__}")


def crash(self, input_: torch.Tensor) -> torch.Tensor:
    if self.rank_in_group == 1:
        os._exit(3)
    return reference.all_reduce(self, input_)


def _never() -> bool:
    return False


_never.reason = "never here"  # type: ignore[attr-defined]


def _impl(op: str, fn, available=None) -> OpImpl:
    return OpImpl(op, IMPL, "vendor", fn, vendor="broken", available=available)


def register() -> None:
    registry = get_default_manager().registry
    registry.register_many(
        [
            _impl("off_by_one", off_by_one),
            _impl("in_place", in_place),
            _impl("gather_everywhere", gather_everywhere),
            _impl("one_sided", one_sided),
            _impl("unavailable", off_by_one, _never),
            _impl("crash", crash),
            _impl("gatherv_first", gatherv_first),
            _impl("gatherv_in_place_rows", gatherv_in_place_rows),
        ]
    )
    with registry.registering_for(Backend("hooked", communicator_setup=set_up)):
        registry.register_impl(_impl("with_state", with_state))
    with registry.registering_for(Backend("refusing", communicator_setup=refuse)):
        registry.register_impl(_impl("on_another_communicator", off_by_one))

"""Collectives through FlagCX, on the communicator ``communicator_setup`` made for the group
(``self.backend_state["flagcx"]``), enqueued on the current device stream as vLLM's own are.

FlagCX has no gather: ``gather`` all-gathers and keeps the result on ``dst`` (more traffic, the
same answer); uneven ``reduce_scatterv`` all-reduces and keeps this rank's chunk; uneven
``all_gatherv`` all-gathers chunks padded to the largest and cuts each rank's rows out.
"""

from __future__ import annotations

from typing import Any

import torch

from vllm_fl.backends.reference.impl.collectives import (
    concatenated_along,
    gather_buffer,
    scatter_buffers,
    uneven_all_gather,
    uneven_reduce_scatter,
)


def _group(self) -> Any:
    return self.backend_state["flagcx"]


def _stream(tensor: torch.Tensor) -> Any:
    return torch.cuda.current_stream(tensor.device) if tensor.is_cuda else None


def all_reduce(self, input_: torch.Tensor) -> torch.Tensor:
    """The sum over the ranks (``flagcxAllReduce``)."""
    group = _group(self)
    source = input_.contiguous()
    out = torch.empty_like(source)
    group.library.all_reduce(group.comm, source, out, _stream(source))
    return out


def all_gather(self, input_: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """The ranks' tensors along ``dim`` (``flagcxAllGather``)."""
    group = _group(self)
    source = input_.contiguous()
    gathered = gather_buffer(source, self.world_size)
    group.library.all_gather(group.comm, source, gathered, _stream(source))
    return concatenated_along(gathered, input_, dim, self.world_size)


def all_gatherv(
    self,
    input_: torch.Tensor | list[torch.Tensor],
    dim: int = 0,
    sizes: list[int] | None = None,
) -> torch.Tensor | list[torch.Tensor]:
    """The ranks' tensors along ``dim``, rank r's ``sizes[r]`` long (``flagcxAllGather``)."""
    return uneven_all_gather(self, input_, dim, sizes, all_gather)


def reduce_scatter(self, input_: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """This rank's chunk of the sum (``flagcxReduceScatter``)."""
    group = _group(self)
    moved, out = scatter_buffers(input_, dim, self.world_size)
    group.library.reduce_scatter(group.comm, moved, out, _stream(moved))
    return out.movedim(0, dim % input_.dim()).contiguous()


def reduce_scatterv(
    self, input_: torch.Tensor, dim: int = -1, sizes: list[int] | None = None
) -> torch.Tensor:
    """This rank's chunk of the sum, chunks of ``sizes``."""
    return uneven_reduce_scatter(self, input_, dim, sizes, reduce_scatter, all_reduce)


def gather(self, input_: torch.Tensor, dst: int = 0, dim: int = -1) -> torch.Tensor | None:
    """The ranks' tensors along ``dim`` on rank ``dst``, else None."""
    gathered = all_gather(self, input_, dim)
    return gathered if self.rank_in_group == dst else None


def send(self, tensor: torch.Tensor, dst: int | None = None) -> None:
    """To rank ``dst`` of the group, the next one by default (``flagcxSend``)."""
    group = _group(self)
    if dst is None:
        dst = (self.rank_in_group + 1) % self.world_size
    source = tensor.contiguous()
    group.library.send(group.comm, source, dst, _stream(source))


def recv(self, size: list[int], dtype: torch.dtype, src: int | None = None) -> torch.Tensor:
    """From rank ``src`` of the group, the previous one by default (``flagcxRecv``)."""
    group = _group(self)
    if src is None:
        src = (self.rank_in_group - 1) % self.world_size
    out = torch.empty(size, dtype=dtype, device=self.device)
    group.library.recv(group.comm, out, src, _stream(out))
    return out

"""Collectives with ``torch.distributed`` on the group vLLM gave the communicator, whatever its
device backend (nccl, gloo, hccl, ...): the ground truth every collective impl is compared with.

Each impl takes the communicator first (``self``: ``device_group``, ``world_size``,
``rank_in_group``, ``ranks``, ``device``) and returns new tensors; none writes into its input.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.distributed as dist


def all_reduce(self, input_: torch.Tensor) -> torch.Tensor:
    """The sum over the ranks, on every rank."""
    out = input_.clone()
    dist.all_reduce(out, group=self.device_group)
    return out


def all_gather(self, input_: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """The ranks' tensors concatenated along ``dim`` in rank order."""
    gathered = gather_buffer(input_, self.world_size)
    dist.all_gather_into_tensor(gathered, input_.contiguous(), group=self.device_group)
    return concatenated_along(gathered, input_, dim, self.world_size)


def gather_buffer(input_: torch.Tensor, world_size: int) -> torch.Tensor:
    """The buffer an all-gather of ``input_`` fills: the ranks' tensors one after another
    along dimension 0, [world_size * n0, ...]."""
    shape = (world_size * input_.shape[0],) + tuple(input_.shape[1:])
    return torch.empty(shape, dtype=input_.dtype, device=input_.device)


def concatenated_along(
    gathered: torch.Tensor, input_: torch.Tensor, dim: int, world_size: int
) -> torch.Tensor:
    """A filled ``gather_buffer`` as the ranks' tensors concatenated along ``dim``."""
    dim = dim % input_.dim()
    # [world * n0, ...] -> [world, n0, ...] -> the world axis beside dim, then merged into it
    stacked = gathered.reshape((world_size,) + tuple(input_.shape)).movedim(0, dim)
    shape = list(input_.shape)
    shape[dim] *= world_size
    return stacked.reshape(shape)


def all_gatherv(
    self,
    input_: torch.Tensor | list[torch.Tensor],
    dim: int = 0,
    sizes: list[int] | None = None,
) -> torch.Tensor | list[torch.Tensor]:
    """The ranks' tensors along ``dim`` in rank order, rank r's ``sizes[r]`` long there; a list
    gathers each tensor."""
    return uneven_all_gather(self, input_, dim, sizes, all_gather)


def uneven_all_gather(
    self,
    input_: torch.Tensor | list[torch.Tensor],
    dim: int,
    sizes: list[int] | None,
    all_gather_fn: Callable[..., torch.Tensor],
) -> torch.Tensor | list[torch.Tensor]:
    """``all_gatherv`` over a backend's ``all_gather_fn(self, tensor, dim)``: a tensor gives a
    tensor, a list a list (each tensor gathered with the same ``sizes``). Equal sizes (or none)
    are the all-gather itself; uneven ones are padded along ``dim`` to the largest, so that
    every library's equal-size all-gather carries them (gloo has no uneven one), and each rank's
    rows are cut out of the result."""
    if isinstance(input_, torch.Tensor):
        return _gather_padded(self, input_, dim, sizes, all_gather_fn)
    return [_gather_padded(self, tensor, dim, sizes, all_gather_fn) for tensor in input_]


def _gather_padded(
    self,
    tensor: torch.Tensor,
    dim: int,
    sizes: list[int] | None,
    all_gather_fn: Callable[..., torch.Tensor],
) -> torch.Tensor:
    dim = dim % tensor.dim()
    if sizes is not None and (
        len(sizes) != self.world_size or tensor.shape[dim] != sizes[self.rank_in_group]
    ):
        raise ValueError(
            f"all_gatherv: sizes {list(sizes)} of {self.world_size} ranks do not give rank "
            f"{self.rank_in_group} its {tensor.shape[dim]} rows along dimension {dim}"
        )
    if sizes is None or len(set(sizes)) == 1:
        return all_gather_fn(self, tensor, dim)
    largest = max(sizes)
    shape = list(tensor.shape)
    shape[dim] = largest
    padded = tensor.new_zeros(shape)
    padded.narrow(dim, 0, tensor.shape[dim]).copy_(tensor)
    gathered = all_gather_fn(self, padded, dim)
    parts = [gathered.narrow(dim, rank * largest, size) for rank, size in enumerate(sizes)]
    return torch.cat(parts, dim=dim)


def reduce_scatter(self, input_: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Chunk ``rank_in_group`` (of ``world_size`` equal ones along ``dim``) of the sum."""
    moved, out = scatter_buffers(input_, dim, self.world_size)
    dist.reduce_scatter_tensor(out, moved, group=self.device_group)
    return out.movedim(0, dim % input_.dim()).contiguous()


def scatter_buffers(
    input_: torch.Tensor, dim: int, world_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """A reduce-scatter's input with ``dim`` moved first (contiguous) and its output buffer
    (one of ``world_size`` equal chunks along that dimension); the output's ``movedim(0, dim)``
    is the result."""
    dim = dim % input_.dim()
    if input_.shape[dim] % world_size:
        raise ValueError(
            f"reduce_scatter: dimension {dim} of size {input_.shape[dim]} does not split into "
            f"{world_size} equal chunks"
        )
    moved = input_.movedim(dim, 0).contiguous()
    shape = (moved.shape[0] // world_size,) + tuple(moved.shape[1:])
    return moved, torch.empty(shape, dtype=input_.dtype, device=input_.device)


def reduce_scatterv(
    self, input_: torch.Tensor, dim: int = -1, sizes: list[int] | None = None
) -> torch.Tensor:
    """Chunk ``rank_in_group`` of the sum, chunk r being ``sizes[r]`` long along ``dim``."""
    return uneven_reduce_scatter(self, input_, dim, sizes, reduce_scatter, all_reduce)


def uneven_reduce_scatter(
    self,
    input_: torch.Tensor,
    dim: int,
    sizes: list[int] | None,
    reduce_scatter_fn: Callable[..., torch.Tensor],
    all_reduce_fn: Callable[..., torch.Tensor],
) -> torch.Tensor:
    """``reduce_scatterv`` over a backend's collectives: equal chunks (or no ``sizes``) by its
    ``reduce_scatter_fn(self, input_, dim)``; uneven ones as this rank's chunk of its
    ``all_reduce_fn(self, input_)``."""
    if sizes is None or len(set(sizes)) == 1:
        return reduce_scatter_fn(self, input_, dim)
    dim = dim % input_.dim()
    if len(sizes) != self.world_size or sum(sizes) != input_.shape[dim]:
        raise ValueError(
            f"reduce_scatterv: sizes {list(sizes)} do not split dimension {dim} of size "
            f"{input_.shape[dim]} among {self.world_size} ranks"
        )
    start = sum(sizes[: self.rank_in_group])
    total = all_reduce_fn(self, input_)
    return total.narrow(dim, start, sizes[self.rank_in_group]).contiguous()


def gather(self, input_: torch.Tensor, dst: int = 0, dim: int = -1) -> torch.Tensor | None:
    """The ranks' tensors concatenated along ``dim`` on rank ``dst`` of the group, else None."""
    receiving = self.rank_in_group == dst
    parts = [torch.empty_like(input_) for _ in range(self.world_size)] if receiving else None
    dist.gather(input_.contiguous(), parts, dst=self.ranks[dst], group=self.device_group)
    return torch.cat(parts, dim=dim) if parts is not None else None


def send(self, tensor: torch.Tensor, dst: int | None = None) -> None:
    """Blocking send to rank ``dst`` of the group (the next one by default)."""
    if dst is None:
        dst = (self.rank_in_group + 1) % self.world_size
    dist.send(tensor.contiguous(), self.ranks[dst], group=self.device_group)


def recv(self, size: list[int], dtype: torch.dtype, src: int | None = None) -> torch.Tensor:
    """A tensor of ``size`` and ``dtype`` from rank ``src`` of the group (the previous one by
    default)."""
    if src is None:
        src = (self.rank_in_group - 1) % self.world_size
    out = torch.empty(size, dtype=dtype, device=self.device)
    dist.recv(out, self.ranks[src], group=self.device_group)
    return out

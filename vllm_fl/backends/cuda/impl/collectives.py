"""Collectives through vLLM's own CUDA communicator (custom all-reduce, pynccl, symmetric
memory), so the shipped policy keeps vLLM's speed and its CUDA-graph behaviour.

``self`` is the plugin's ``CudaCommunicatorFL``, which is a vLLM ``CudaCommunicator``: the cuda
backend's ``communicator_setup`` hook built vLLM's state in it (``vllm_fl.backends.cuda``). Each
impl is vLLM's method of that class, whatever the installed vLLM does in it.
"""

from __future__ import annotations

from typing import Any

import torch


def _vllm() -> Any:
    """vLLM's ``CudaCommunicator`` (imported on first call: impl modules import without vLLM)."""
    from vllm.distributed.device_communicators.cuda_communicator import CudaCommunicator

    return CudaCommunicator


def all_reduce(self, input_: torch.Tensor) -> torch.Tensor:
    """vLLM's all-reduce (custom all-reduce, symmetric memory or pynccl, by size)."""
    return _vllm().all_reduce(self, input_)


def all_gather(self, input_: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """vLLM's all-gather."""
    return _vllm().all_gather(self, input_, dim)


def all_gatherv(
    self,
    input_: torch.Tensor | list[torch.Tensor],
    dim: int = 0,
    sizes: list[int] | None = None,
) -> torch.Tensor | list[torch.Tensor]:
    """vLLM's all-gather of uneven chunks (pynccl; a list in one NCCL group; dim 0 only)."""
    return _vllm().all_gatherv(self, input_, dim, sizes)


def reduce_scatter(self, input_: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """vLLM's reduce-scatter (pynccl)."""
    return _vllm().reduce_scatter(self, input_, dim)


def reduce_scatterv(
    self, input_: torch.Tensor, dim: int = -1, sizes: list[int] | None = None
) -> torch.Tensor:
    """vLLM's reduce-scatter of uneven chunks (pynccl)."""
    return _vllm().reduce_scatterv(self, input_, dim, sizes)


def gather(self, input_: torch.Tensor, dst: int = 0, dim: int = -1) -> torch.Tensor | None:
    """vLLM's gather."""
    return _vllm().gather(self, input_, dst, dim)


def send(self, tensor: torch.Tensor, dst: int | None = None) -> None:
    """vLLM's send (pynccl)."""
    _vllm().send(self, tensor, dst)


def recv(self, size: list[int], dtype: torch.dtype, src: int | None = None) -> torch.Tensor:
    """vLLM's recv (pynccl)."""
    return _vllm().recv(self, size, dtype, src)

"""``CudaCommunicatorFL``: ``CommunicatorFL`` on the CUDA platform.

vLLM's CUDA graph capture asserts that a group's device communicator is a ``CudaCommunicator``
and enters its custom all-reduce's capture context, so the plugin's communicator is one. vLLM's
own CUDA state (pynccl, the custom all-reduce, symmetric memory) is built only when a collective
selected the cuda backend (its ``communicator_setup`` hook, ``vllm_fl.backends.cuda``); otherwise those attributes are None,
as vLLM's own communicator has them when it disables each piece, and no kernel compiled into
vLLM runs for the group.
"""

from __future__ import annotations

from typing import Any

from vllm.distributed.device_communicators.cuda_communicator import CudaCommunicator

from .communicator import CommunicatorFL

__all__ = ["CudaCommunicatorFL"]

#: the attributes of vLLM's CudaCommunicator its other methods and vLLM's graph capture read
CUDA_STATE = (
    "pynccl_comm",
    "ca_comm",
    "qr_comm",
    "symm_mem_comm",
    "fi_ar_comm",
    "fi_pcie_ipc_ar_comm",
    "aiter_ar_comm",
)


class CudaCommunicatorFL(CommunicatorFL, CudaCommunicator):
    """``CommunicatorFL`` that is a vLLM ``CudaCommunicator`` (see the module docstring)."""

    def __init__(self, **init_kwargs: Any) -> None:
        for name in CUDA_STATE:
            setattr(self, name, None)
        self.use_custom_allreduce = self.use_torch_symm_mem = False
        CommunicatorFL.__init__(self, **init_kwargs)

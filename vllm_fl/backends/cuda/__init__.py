"""CUDA vendor backend (``vendor:cuda``): vLLM's compiled kernels (``vllm._custom_ops``) and, for
the collectives, vLLM's own CUDA communicator.

``BACKEND`` declares one hook: ``communicator_setup`` builds vLLM's CUDA communicator state
(pynccl, custom all-reduce) in a process group's ``CudaCommunicatorFL`` when a collective of
the group selected this backend.
"""

from typing import Any

from vllm_fl.dispatch import Backend, CommunicatorUnsupported


def set_up_communicator(communicator: Any) -> None:
    """``communicator_setup``: vLLM's ``CudaCommunicator`` state in ``communicator`` (the
    plugin's ``CudaCommunicatorFL``), built by vLLM's own constructor, collectively as vLLM
    does; vLLM is imported here, on first use (it needs vLLM's CUDA build)."""
    from vllm.distributed.device_communicators.cuda_communicator import CudaCommunicator

    if not isinstance(communicator, CudaCommunicator):
        raise CommunicatorUnsupported(
            "the cuda backend's collectives need vLLM's CudaCommunicator; the platform built "
            f"{type(communicator).__name__} (a platform other than the plugin's CUDA platform)"
        )
    CudaCommunicator.__init__(communicator, **communicator.init_kwargs)


BACKEND = Backend("cuda", communicator_setup=set_up_communicator)

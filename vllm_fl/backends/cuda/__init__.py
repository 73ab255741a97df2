"""CUDA vendor backend (``vendor:cuda``): vLLM's compiled kernels (``vllm._custom_ops``) and, for
the collectives, vLLM's own CUDA communicator.

``BACKEND`` declares one hook: ``communicator_setup`` builds vLLM's CUDA communicator state
(pynccl, custom all-reduce) in a process group's ``CudaCommunicatorFL`` when a collective of
the group selected this backend.
"""

from vllm_fl.dispatch import Backend


def set_up_communicator(communicator: object) -> None:
    """``vllm_fl.distributed.cuda.set_up_vllm_state`` (imported on first use: it needs vLLM's
    CUDA build)."""
    from vllm_fl.distributed.cuda import set_up_vllm_state

    set_up_vllm_state(communicator)  # type: ignore[arg-type]


BACKEND = Backend("cuda", communicator_setup=set_up_communicator)

"""vLLM's distributed state for one process, where no vLLM worker sets it up: building a model
(``vllm-fl coverage``) or single layers (the parity tests) outside an engine."""

from __future__ import annotations

import os
import tempfile


def init_single_process() -> None:
    """The distributed state vLLM's layers ask for (tensor-parallel size, ranks): one process,
    gloo, world size 1; kept for later models and layers of the same process, and left as it is
    where vLLM's model-parallel groups exist already. Needs a current vLLM config (vLLM's groups
    read it)."""
    import torch.distributed as dist
    from vllm.distributed import (
        init_distributed_environment,
        initialize_model_parallel,
        model_parallel_is_initialized,
    )

    if model_parallel_is_initialized():
        return
    if not dist.is_initialized():
        handle, rendezvous = tempfile.mkstemp(prefix="vllm-fl-rdzv-")
        os.close(handle)
        os.unlink(rendezvous)  # gloo's file store creates it
        init_distributed_environment(
            world_size=1,
            rank=0,
            local_rank=0,
            distributed_init_method=f"file://{rendezvous}",
            backend="gloo",
        )
    initialize_model_parallel(1, 1)

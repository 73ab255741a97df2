"""The all-to-all of MoE expert parallelism on the plugin's communicator.

Under data + expert parallelism vLLM moves each MoE layer's tokens with the all2all manager of
the expert-parallel group's communicator: ``dispatch`` (or ``dispatch_router_logits``) before the
experts, ``combine`` after. vLLM's ``DeviceCommunicatorBase`` builds none (its ``dispatch`` and
``combine`` return their inputs); vLLM's ``CudaCommunicator`` builds one in its constructor, which
runs on the plugin's communicator only when the cuda backend's ``communicator_setup`` hook does.

So where vLLM would use a manager (``use_all2all``) and no backend hook built one, ``All2AllFL``
builds vLLM's ``AgRsAll2AllManager`` for the all2all backends ``allgather_reducescatter`` and
``naive``: pure Python over the DP (or EP) group's ``all_gatherv`` and ``reduce_scatterv``,
which are ops of the dispatch, so the tokens move on whatever implementations the policy
selected. The other backends (DeepEP, Mori, FlashInfer, NIXL, ...) are kernels of their own; the
plugin has none, so asking for one stops the start-up with what is supported.
"""

from __future__ import annotations

from typing import Any

import torch

from vllm_fl.dispatch import DispatchError

__all__ = ["All2AllFL", "PORTABLE_ALL2ALL_BACKENDS"]

#: vLLM's all2all backends the plugin builds a manager for without the cuda backend: vLLM's
#: AgRsAll2AllManager, whose dispatch is an all_gatherv and whose combine a reduce_scatterv
#: ("naive" is vLLM's older name of the same manager)
PORTABLE_ALL2ALL_BACKENDS = ("allgather_reducescatter", "naive")


class All2AllFL:
    """The all2all half of ``CommunicatorFL``: the manager vLLM would use where no backend hook
    built one, and vLLM's ``CudaCommunicator`` methods that hand MoE tokens to it."""

    # set by DeviceCommunicatorBase.__init__ (which the communicator runs first)
    use_all2all: bool
    all2all_backend: str | None
    all2all_manager: Any
    unique_name: str
    cpu_group: Any
    init_kwargs: dict[str, Any]

    def _set_up_all2all(self) -> None:
        """Build vLLM's all-gather/reduce-scatter manager when the group needs a manager and
        none was built; raise ``DispatchError`` for an all2all backend the plugin cannot run."""
        if not self.use_all2all or self.all2all_manager is not None:
            return
        if self.all2all_backend not in PORTABLE_ALL2ALL_BACKENDS:
            raise DispatchError(
                f"process group {self.unique_name!r}: vLLM's all2all backend "
                f"{self.all2all_backend!r} (--all2all-backend) runs kernels of its own, which "
                "the plugin's collectives do not provide. Supported: "
                + " or ".join(repr(b) for b in PORTABLE_ALL2ALL_BACKENDS)
                + " (vLLM's all-gather/reduce-scatter all-to-all, on the dispatched "
                "all_gatherv and reduce_scatterv); the others only where a collective of the "
                "group runs on the cuda backend (the shipped CUDA policy), whose set-up builds "
                "vLLM's own managers"
            )
        from vllm.distributed.device_communicators.all2all import AgRsAll2AllManager

        # vLLM's CudaCommunicator passes its stateless TCP-store group (elastic EP), if any
        self.all2all_manager = AgRsAll2AllManager(
            self.cpu_group, self.init_kwargs.get("tcp_store_group")
        )

    # vLLM's CudaCommunicator delegates these to its manager; without one (a group that uses
    # no all-to-all) they do what DeviceCommunicatorBase does: hand the tokens back

    def dispatch_router_logits(
        self,
        hidden_states: torch.Tensor,
        router_logits: torch.Tensor,
        is_sequence_parallel: bool = False,
        extra_tensors: list[torch.Tensor] | None = None,
    ) -> Any:
        """Every rank's hidden states and router logits (and ``extra_tensors``), through the
        manager."""
        if self.all2all_manager is None:
            if extra_tensors is not None:
                return hidden_states, router_logits, extra_tensors
            return hidden_states, router_logits
        return self.all2all_manager.dispatch_router_logits(
            hidden_states, router_logits, is_sequence_parallel, extra_tensors
        )

    def dispatch(
        self,
        hidden_states: torch.Tensor,
        topk_weights: torch.Tensor,
        topk_ids: torch.Tensor,
        is_sequence_parallel: bool = False,
        extra_tensors: list[torch.Tensor] | None = None,
    ) -> Any:
        """Every rank's hidden states with their top-k weights and expert ids (and
        ``extra_tensors``), through the manager."""
        if self.all2all_manager is None:
            if extra_tensors is not None:
                return hidden_states, topk_weights, topk_ids, extra_tensors
            return hidden_states, topk_weights, topk_ids
        return self.all2all_manager.dispatch(
            hidden_states,
            topk_weights,
            topk_ids,
            is_sequence_parallel,
            extra_tensors=extra_tensors,
        )

    def combine(
        self, hidden_states: torch.Tensor, is_sequence_parallel: bool = False
    ) -> torch.Tensor:
        """This rank's tokens of the experts' outputs summed over the ranks, through the
        manager."""
        if self.all2all_manager is None:
            return hidden_states
        return self.all2all_manager.combine(hidden_states, is_sequence_parallel)

    def allocate_combine_input(
        self,
        shape: tuple[int, ...],
        dtype: torch.dtype,
        device: torch.device,
        is_sequence_parallel: bool = False,
    ) -> torch.Tensor | None:
        """vLLM 0.32: a buffer the manager's combine reads faster, or None."""
        if self.all2all_manager is None:
            return None
        return self.all2all_manager.allocate_combine_input(
            shape, dtype, device, is_sequence_parallel
        )

    def combine_into_output(
        self,
        hidden_states: torch.Tensor,
        output: torch.Tensor,
        is_sequence_parallel: bool = False,
    ) -> torch.Tensor:
        """vLLM 0.32: ``combine`` written into ``output``."""
        if self.all2all_manager is None:
            output.copy_(hidden_states)
            return output
        return self.all2all_manager.combine_into_output(hidden_states, output, is_sequence_parallel)

    def reduce_scatterv_into_output(
        self,
        input_: torch.Tensor,
        output: torch.Tensor,
        dim: int = -1,
        sizes: list[int] | None = None,
    ) -> torch.Tensor:
        """vLLM 0.32's combine into an output: the dispatched ``reduce_scatterv`` copied into
        ``output`` (as DeviceCommunicatorBase does; vLLM's CudaCommunicator would run pynccl,
        which is not there when the collective runs elsewhere)."""
        output.copy_(self.reduce_scatterv(input_, dim, sizes))  # type: ignore[attr-defined]
        return output

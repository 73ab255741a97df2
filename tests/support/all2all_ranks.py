"""The ranks of ``tests/distributed/test_all2all.py``: each a spawned process that sets up vLLM's
process groups for data parallelism 2 with expert parallelism on a two-rank gloo world, under
the plugin's CPU platform (so vLLM builds every group's communicator from ``CommunicatorFL``),
and moves a MoE layer's tokens through the expert-parallel group as vLLM's MoE runner does;
each reports what happened in a file."""

from __future__ import annotations

import json
import os
import traceback
from pathlib import Path

#: tokens of each data-parallel rank in the step: uneven, as a scheduler leaves them
TOKENS = (3, 2)
HIDDEN = 4
TOP_K = 2
EXPERTS = 8


def inputs(rank: int) -> dict:
    """Rank ``rank``'s hidden states, router logits, top-k weights and expert ids (every rank
    can compute every other's, so the test knows what each rank must receive)."""
    import torch

    n = TOKENS[rank]
    hidden = torch.arange(n * HIDDEN, dtype=torch.float32).reshape(n, HIDDEN) + 100 * rank
    return {
        "hidden": hidden,
        "logits": torch.arange(n * EXPERTS, dtype=torch.float32).reshape(n, EXPERTS) - rank,
        "weights": torch.full((n, TOP_K), 0.5 + rank),
        "ids": (torch.arange(n * TOP_K, dtype=torch.int32).reshape(n, TOP_K) + rank) % EXPERTS,
    }


def rank_main(rank: int, world: int, store: str, out: str, all2all_backend: str) -> None:
    """Run as rank ``rank``; write ``{"rank", "outcome", ...}`` to ``out``-<rank>."""
    report: dict = {"rank": rank}
    try:
        os.environ["VLLM_FL_PLATFORM"] = "cpu"  # vLLM resolves its platform on first use
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
        from vllm.config import ParallelConfig, VllmConfig, set_current_vllm_config
        from vllm.distributed import parallel_state
        from vllm.forward_context import get_forward_context, set_forward_context

        parallel = ParallelConfig(
            data_parallel_size=world,
            data_parallel_rank=rank,
            enable_expert_parallel=True,
            all2all_backend=all2all_backend,
        )
        config = VllmConfig(parallel_config=parallel)
        with set_current_vllm_config(config):
            # one process per data-parallel rank: vLLM offsets rank 0 of its own world by it
            parallel_state.init_distributed_environment(
                world_size=1, rank=0, local_rank=0, backend="gloo"
            )
            parallel_state.initialize_model_parallel(1, 1)
            ep = parallel_state.get_ep_group()
            dp = parallel_state.get_dp_group()
            report["ep_communicator"] = type(ep.device_communicator).__name__
            report["ep_manager"] = type(ep.device_communicator.all2all_manager).__name__
            report["dp_manager"] = type(dp.device_communicator.all2all_manager).__name__
            mine = inputs(rank)
            across = torch.tensor(TOKENS, dtype=torch.int32)
            with set_forward_context(
                None, config, num_tokens=TOKENS[rank], num_tokens_across_dp=across
            ):
                # what vLLM's MoE runner enters around its dispatch and combine
                with get_forward_context().dp_metadata.sp_local_sizes(1):
                    hidden, logits = ep.dispatch_router_logits(mine["hidden"], mine["logits"])
                    report["router_hidden"] = hidden.tolist()
                    report["router_logits"] = logits.tolist()
                    hidden, weights, ids = ep.dispatch(mine["hidden"], mine["weights"], mine["ids"])
                    report["hidden"] = hidden.tolist()
                    report["weights"] = weights.tolist()
                    report["ids"] = ids.tolist()
                    report["ids_dtype"] = str(ids.dtype)
                    # each rank's experts' share of every token: the combine sums the shares
                    report["combined"] = ep.combine(hidden * (rank + 1)).tolist()
        report["outcome"] = "ok"
    except Exception as exc:  # noqa: BLE001 - the report says what happened
        report["outcome"] = type(exc).__name__
        report["message"] = str(exc)
        report["traceback"] = traceback.format_exc()[-2000:]
    Path(f"{out}-{rank}").write_text(json.dumps(report))

"""GPU time of the flagos alignment (``moe_align_block_size``) by pair count, inside CUDA graphs.

The backend aligns a call's (token, slot) pairs in one program (``routing_kernels.py``), where
FlagGems launches five kernels: far less host time per call, but one program does all the work,
so its GPU time grows with the pairs. This times both inside CUDA graphs (GPU time only: what a
compiled, graph-captured engine pays) at Qwen3-MoE's routing (128 experts, top 8, block 16), the
one-program kernel at several warp counts, to choose how many pairs it takes.

    python -m benchmarks.bench_align [--tokens 1,8,...] [--json F]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from benchmarks.cli import int_list, write_json
from benchmarks.timing import gpu_us
from vllm_fl.kernels import routing_kernels

EXPERTS, TOP_K, BLOCK = 128, 8, 16
WARPS = (4, 8, 16)


def _buffers(tokens: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    topk_ids = torch.stack(
        [torch.randperm(EXPERTS, device="cuda")[:TOP_K] for _ in range(tokens)]
    ).to(torch.int32)
    padded = topk_ids.numel() + EXPERTS * (BLOCK - 1)
    sizes = (padded, -(-padded // BLOCK), 1)
    return topk_ids, [torch.empty(n, dtype=torch.int32, device="cuda") for n in sizes]


def measure(tokens_list: list[int]) -> list[dict]:
    from flag_gems.fused import moe_align_block_size_triton

    rows = []

    def record(tokens: int, pairs: int, impl: str, call) -> None:
        rows.append(
            {
                "tokens": tokens,
                "pairs": pairs,
                "impl": impl,
                "graph_us": round(gpu_us(call, graph=True), 2),
            }
        )
        print(rows[-1], flush=True)

    for tokens in tokens_list:
        topk_ids, outs = _buffers(tokens)
        pairs = topk_ids.numel()
        planned = routing_kernels.align_launch(topk_ids, EXPERTS, BLOCK, *outs)
        for warps in WARPS if planned is not None else ():
            kwargs = {**planned.kwargs, "num_warps": warps}

            def one_program(planned=planned, kwargs=kwargs):
                routing_kernels.align_pairs_kernel[planned.grid](*planned.args, **kwargs)

            record(tokens, pairs, f"one program, {warps} warps", one_program)

        def staged():
            moe_align_block_size_triton(topk_ids, EXPERTS, BLOCK, *outs)

        record(tokens, pairs, "FlagGems staged", staged)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int_list, default="1,8,16,32,64,128,256,512")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rows = measure(args.tokens)
    if args.json:
        write_json(args.json, {"device": torch.cuda.get_device_name(), "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())

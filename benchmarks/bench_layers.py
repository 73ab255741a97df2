"""Eager cost of a replaced vLLM layer: vLLM's own `forward_cuda` against our `forward_oot`.

Both methods live on the same layer object (our generated class subclasses vLLM's), so one
process on one GPU compares them call for call: wall time per call with the GPU kept busy
(launch-bound at small token counts) and CUDA-event time per call. Run on a GPU with vLLM
installed and the plugin's platform off:

    VLLM_PLUGINS=none python benchmarks/bench_layers.py [--tokens 1,256,8192]
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

HIDDEN, INTERMEDIATE, HEADS, KV_HEADS, HEAD_DIM = 4096, 14336, 32, 8, 128


def _layers(dtype: torch.dtype):
    from vllm_fl.ops.activation import SiluAndMulFL
    from vllm_fl.ops.layernorm import RMSNormFL
    from vllm_fl.ops.rotary_embedding import RotaryEmbeddingFL

    norm = RMSNormFL(HIDDEN, eps=1e-5).to("cuda", dtype)
    act = SiluAndMulFL()
    rope = RotaryEmbeddingFL(HEAD_DIM, HEAD_DIM, 8192, 500000.0, True, dtype).to("cuda")
    return norm, act, rope


def _cases(tokens: int, dtype: torch.dtype, layers):
    norm, act, rope = layers

    def randn(*shape):
        return torch.randn(*shape, device="cuda", dtype=dtype)

    x, r = randn(tokens, HIDDEN), randn(tokens, HIDDEN)
    g = randn(tokens, 2 * INTERMEDIATE)
    pos = torch.randint(0, 8192, (tokens,), device="cuda")
    q, k = randn(tokens, HEADS * HEAD_DIM), randn(tokens, KV_HEADS * HEAD_DIM)
    return {
        "RMSNorm(x)": (norm, (x,)),
        "RMSNorm(x, residual)": (norm, (x, r)),
        "SiluAndMul": (act, (g,)),
        "RotaryEmbedding": (rope, (pos, q, k)),
    }


def _per_call_us(fn, args, iters: int) -> tuple[float, float]:
    for _ in range(10):
        fn(*args)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    for _ in range(iters):
        fn(*args)
    end.record()
    end.synchronize()
    wall = (time.perf_counter() - t0) / iters * 1e6
    return wall, start.elapsed_time(end) / iters * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="1,256,8192")
    parser.add_argument("--iters", type=int, default=500)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_layers: needs a CUDA device", file=sys.stderr)
        return 0
    from vllm.config import VllmConfig, set_current_vllm_config

    from vllm_fl.dispatch import get_default_manager

    dtype = torch.bfloat16
    with set_current_vllm_config(VllmConfig()):
        layers = _layers(dtype)
    get_default_manager().resolve_all()
    print(
        f"{'layer':<22}{'tokens':>7}  {'forward_cuda us (wall/gpu)':>28}  "
        f"{'forward_oot us (wall/gpu)':>28}"
    )
    for t in (int(v) for v in args.tokens.split(",")):
        for name, (layer, inputs) in _cases(t, dtype, layers).items():
            # Clones per method: both may write into their inputs, as vLLM's kernels do.
            cuda = _per_call_us(layer.forward_cuda, tuple(i.clone() for i in inputs), args.iters)
            oot = _per_call_us(layer.forward_oot, tuple(i.clone() for i in inputs), args.iters)
            print(
                f"{name:<22}{t:>7}  {cuda[0]:>13.1f} / {cuda[1]:>10.1f}  "
                f"{oot[0]:>13.1f} / {oot[1]:>10.1f}"
            )
    print("impls used by forward_oot:", get_default_manager().used_impls())
    return 0


if __name__ == "__main__":
    sys.exit(main())

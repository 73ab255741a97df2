"""Under torch.compile: FlagGems kernels as opaque custom ops, or traced as user-defined Triton
kernels (``torch.library.triton_op`` + ``wrap_triton``), against Inductor's own kernels.

The flagos backend registers each kernel as an opaque ``torch.library`` custom op: Dynamo and
Inductor see a call they cannot look into. ``triton_op`` lets Dynamo trace the Triton launch
itself, so Inductor schedules the user kernel among its own (it still does not fuse into it).
This measures a decoder block's elementwise part (residual add, RMSNorm, the MLP's SiLU-and-mul
around its two matmuls) compiled three ways, timed as CUDA-graph replays as vLLM runs it:

    python -m benchmarks.bench_triton_op --tokens 1,16,64,256
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from benchmarks.timing import gpu_us
from vllm_fl.kernels import launch

HIDDEN, INTERMEDIATE = 4096, 14336


def _kernels():
    """FlagGems' rms_norm and swiglu Triton kernels (the JIT functions under libentry)."""
    rms = launch._jit_function(launch.kernel_of("rms_norm", "rms_norm_kernel"))
    swiglu = launch._jit_function(launch.kernel_of("swiglu", "swiglu_kernel"))
    return rms, swiglu


def _define_ops():
    """The two kernels as opaque custom ops and as triton_ops; returns {variant: (rms, swiglu)}."""
    from torch.library import custom_op, triton_op, wrap_triton

    rms_kernel, swiglu_kernel = _kernels()

    def rms_launch(launcher, x, w, eps):
        m, n = x.shape
        out = torch.empty_like(x)
        inv = torch.empty(m, dtype=torch.float32, device=x.device)
        block = launch.next_pow2(n)
        launcher(rms_kernel)[(m,)](out, inv, x, w, n, 1, n, 1, n, eps, BLOCK_SIZE=block)
        return out

    def swiglu_launch(launcher, x):
        m, d = x.shape[0], x.shape[1] // 2
        out = torch.empty((m, d), dtype=x.dtype, device=x.device)
        grid = (-(-m // 64), -(-d // 64))
        launcher(swiglu_kernel)[grid](
            x, out, m, d, 2 * d, 1, d, 1, BLOCK_SIZE_M=64, BLOCK_SIZE_H=64
        )
        return out

    direct = lambda kernel: kernel  # noqa: E731

    @custom_op("fl_bench::rms_opaque", mutates_args=())
    def rms_opaque(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
        return rms_launch(direct, x, w, eps)

    @rms_opaque.register_fake
    def _(x, w, eps):
        return torch.empty_like(x)

    @custom_op("fl_bench::swiglu_opaque", mutates_args=())
    def swiglu_opaque(x: torch.Tensor) -> torch.Tensor:
        return swiglu_launch(direct, x)

    @swiglu_opaque.register_fake
    def _(x):
        return x.new_empty((x.shape[0], x.shape[1] // 2))

    @triton_op("fl_bench::rms_traced", mutates_args=())
    def rms_traced(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
        return rms_launch(wrap_triton, x, w, eps)

    @triton_op("fl_bench::swiglu_traced", mutates_args=())
    def swiglu_traced(x: torch.Tensor) -> torch.Tensor:
        return swiglu_launch(wrap_triton, x)

    def rms_native(x, w, eps):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w

    def swiglu_native(x):
        d = x.shape[-1] // 2
        return torch.nn.functional.silu(x[:, :d]) * x[:, d:]

    return {
        "opaque custom op": (rms_opaque, swiglu_opaque),
        "triton_op (traced)": (rms_traced, swiglu_traced),
        "Inductor (native)": (rms_native, swiglu_native),
    }


def _block(rms, swiglu):
    def block(x, residual, w_norm, w_up, w_down):
        h = x + residual
        y = rms(h, w_norm, 1e-6)
        return swiglu(y @ w_up) @ w_down, h

    return block


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="1,16,64,256")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_triton_op: no CUDA device", file=sys.stderr)
        return 0
    torch.manual_seed(0)
    dtype, dev = torch.bfloat16, "cuda"
    w_norm = torch.randn(HIDDEN, dtype=dtype, device=dev)
    w_up = torch.randn(HIDDEN, 2 * INTERMEDIATE, dtype=dtype, device=dev) * 0.02
    w_down = torch.randn(INTERMEDIATE, HIDDEN, dtype=dtype, device=dev) * 0.02
    rows = []
    for name, (rms, swiglu) in _define_ops().items():
        compiled = torch.compile(_block(rms, swiglu), fullgraph=True, dynamic=False)
        for t in [int(v) for v in args.tokens.split(",")]:
            x = torch.randn(t, HIDDEN, dtype=dtype, device=dev)
            r = torch.randn(t, HIDDEN, dtype=dtype, device=dev)
            call = lambda: compiled(x, r, w_norm, w_up, w_down)  # noqa: E731
            call()
            us = gpu_us(call, graph=True)
            rows.append({"variant": name, "tokens": t, "graph_us": round(us, 2)})
            print(f"{name:<22}{t:>6}{us:>10.2f} us", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

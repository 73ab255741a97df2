"""The quantized GEMMs of one linear layer, kernel by kernel (needs a CUDA device).

For each format it times the candidate kernels on a model's linear shapes (the Llama-3-8B
projections by default) at several token counts: FlagGems' Triton kernels, vLLM's portable Triton
kernels, and the compiled kernels vanilla vLLM runs on an H100 (DeepGEMM, CUTLASS, Marlin through
the op's cuda impl) or cuBLASLt (``torch._scaled_mm``). Inputs are already quantised: the GEMM
alone is timed, in a CUDA graph (the kernel's time, without the host's launch).

    python -m benchmarks.bench_quant_gemm --json benchmarks/results/h100_quant_gemm.json
    python -m benchmarks.bench_quant_gemm --formats fp8-block --tokens 1,4096

A kernel that cannot run a shape (or is missing from the installed libraries) gets its error in
the row instead of a time.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.cli import int_list, name_list, write_json
from benchmarks.tables import Column, text_table

#: (name, N, K) of the Llama-3-8B projections: fused qkv, attention output, fused gate/up, down
LLAMA3_8B_GEMMS = (
    ("qkv", 6144, 4096),
    ("o", 4096, 4096),
    ("gate_up", 28672, 4096),
    ("down", 4096, 14336),
)
TOKENS = (1, 16, 256, 4096)
BLOCK = 128  # FP8 block size (weights 128x128, activations 1x128), and the W4A16 group size


@dataclass
class Row:
    """One kernel on one GEMM at one token count; microseconds in a CUDA graph."""

    format: str
    gemm: str
    n: int
    k: int
    tokens: int
    kernel: str
    us: float | None
    error: str | None = None


# -- inputs -----------------------------------------------------------------------------------


def _fp8(shape, device):
    import torch

    return (torch.randn(shape, device=device) * 0.5).to(torch.float8_e4m3fn)


def _scales(shape, device):
    import torch

    return torch.rand(shape, device=device, dtype=torch.float32) * 1e-2 + 1e-3


# -- candidates: each returns a zero-argument callable running its GEMM on (m, n, k) ------------


def fp8_block_candidates() -> dict[str, Callable]:
    import torch

    out = torch.bfloat16

    def inputs(m, n, k):
        a, b = _fp8((m, k), "cuda"), _fp8((n, k), "cuda")
        return a, b, _scales((m, k // BLOCK), "cuda"), _scales((n // BLOCK, k // BLOCK), "cuda")

    def flaggems(m, n, k):
        import flag_gems

        a, b, a_s, b_s = inputs(m, n, k)
        return lambda: flag_gems.w8a8_block_fp8_matmul(a, b, a_s, b_s, [BLOCK, BLOCK], out)

    def tuned(m, n, k):
        from vllm_fl.kernels import block_fp8

        a, b, a_s, b_s = inputs(m, n, k)
        return lambda: block_fp8.matmul(a, b, a_s, b_s, (BLOCK, BLOCK), out)

    def vllm_triton(m, n, k):
        from vllm.model_executor.layers.quantization.utils.fp8_utils import (
            w8a8_triton_block_scaled_mm,
        )

        a, b, a_s, b_s = inputs(m, n, k)
        return lambda: w8a8_triton_block_scaled_mm(a, b, a_s, b_s, [BLOCK, BLOCK], out)

    def deepgemm(m, n, k):
        from vllm.model_executor.layers.quantization.utils.fp8_utils import (
            deepgemm_post_process_fp8_weight_block,
        )
        from vllm.utils.deep_gemm import fp8_gemm_nt, get_col_major_tma_aligned_tensor

        a, b, a_s, b_s = inputs(m, n, k)
        b, b_s = deepgemm_post_process_fp8_weight_block(b, b_s, (BLOCK, BLOCK), use_e8m0=False)
        a_s = get_col_major_tma_aligned_tensor(a_s)
        c = torch.empty((m, n), dtype=out, device="cuda")
        return lambda: fp8_gemm_nt((a, a_s), (b, b_s), c)

    def cutlass(m, n, k):
        from vllm import _custom_ops as ops

        a, b, a_s, b_s = inputs(m, n, k)
        a_s = a_s.t().contiguous().t()  # column-major, as vLLM's QuantFP8 writes them for it
        return lambda: ops.cutlass_scaled_mm(a, b.T, out_dtype=out, scale_a=a_s, scale_b=b_s.T)

    return {
        "FlagGems w8a8_block_fp8_matmul": flaggems,
        "FlagGems kernel, tuned (vllm_fl.kernels.block_fp8)": tuned,
        "vLLM Triton w8a8_triton_block_scaled_mm": vllm_triton,
        "DeepGEMM fp8_gemm_nt": deepgemm,
        "CUTLASS cutlass_scaled_mm (block)": cutlass,
    }


def _per_channel_candidates(quant: str) -> dict[str, Callable]:
    """FP8 or INT8 weights scaled per output channel, activations per token."""
    import torch

    out = torch.bfloat16

    def inputs(m, n, k):
        if quant == "fp8":
            a, w = _fp8((m, k), "cuda"), _fp8((n, k), "cuda")
        else:
            a = torch.randint(-127, 128, (m, k), dtype=torch.int8, device="cuda")
            w = torch.randint(-127, 128, (n, k), dtype=torch.int8, device="cuda")
        # b is the transposed weight (column-major [K, N]), as vLLM keeps it for these kernels
        return a, w.t(), _scales((m, 1), "cuda"), _scales((n, 1), "cuda")

    def flaggems(m, n, k):
        import flag_gems

        a, b, a_s, b_s = inputs(m, n, k)
        c = torch.empty((m, n), dtype=out, device="cuda")
        return lambda: flag_gems.cutlass_scaled_mm(c, a, b, a_s, b_s)

    def vllm_triton(m, n, k):
        from vllm.model_executor.layers.quantization.compressed_tensors.triton_scaled_mm import (
            triton_scaled_mm,
        )

        a, b, a_s, b_s = inputs(m, n, k)
        return lambda: triton_scaled_mm(a, b, a_s, b_s, out)

    def cutlass(m, n, k):
        from vllm import _custom_ops as ops

        a, b, a_s, b_s = inputs(m, n, k)
        return lambda: ops.cutlass_scaled_mm(a, b, out_dtype=out, scale_a=a_s, scale_b=b_s)

    def cublaslt(m, n, k):
        a, b, a_s, b_s = inputs(m, n, k)
        b_s = b_s.t().contiguous()  # torch._scaled_mm's row-wise scales: [M, 1] and [1, N]
        return lambda: torch._scaled_mm(a, b, scale_a=a_s, scale_b=b_s, out_dtype=out)

    candidates = {
        "vLLM Triton triton_scaled_mm": vllm_triton,
        "CUTLASS cutlass_scaled_mm": cutlass,
    }
    if quant == "fp8":
        candidates = {
            "FlagGems cutlass_scaled_mm (Triton)": flaggems,
            **candidates,
            "cuBLASLt torch._scaled_mm": cublaslt,
        }
    return candidates


def w4a16_candidates() -> dict[str, Callable]:
    """GPTQ 4-bit weights in groups of 128, symmetric (uint4b8)."""
    import torch

    def vllm_triton(m, n, k):
        from vllm.model_executor.kernels.linear.mixed_precision.triton_w4a16 import (
            triton_w4a16_gemm,
        )

        a = torch.randn((m, k), dtype=torch.bfloat16, device="cuda")
        b_q = torch.randint(-(2**31), 2**31 - 1, (k, n // 8), dtype=torch.int32, device="cuda")
        scales = (torch.rand((k // BLOCK, n), device="cuda") * 1e-2).to(torch.bfloat16)
        return lambda: triton_w4a16_gemm(a, b_q, scales, None, BLOCK)

    return {"vLLM Triton triton_w4a16_gemm": vllm_triton}


FORMATS: dict[str, Callable[[], dict[str, Callable]]] = {
    "fp8-block": fp8_block_candidates,
    "fp8-channel": lambda: _per_channel_candidates("fp8"),
    "int8-w8a8": lambda: _per_channel_candidates("int8"),
    "w4a16": w4a16_candidates,
}


def measure(formats, tokens, gemms) -> list[Row]:
    from benchmarks.timing import gpu_us

    rows = []
    for fmt in formats:
        for kernel, setup in FORMATS[fmt]().items():
            for gemm, n, k in gemms:
                for m in tokens:
                    try:
                        fn = setup(m, n, k)
                        fn()  # compile / autotune outside the timed part
                        rows.append(Row(fmt, gemm, n, k, m, kernel, round(gpu_us(fn, True), 2)))
                    except Exception as exc:  # a kernel that cannot run here: say why
                        error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
                        rows.append(Row(fmt, gemm, n, k, m, kernel, None, error))
                    print(rows[-1], flush=True)
    return rows


def table(rows: list[Row]) -> str:
    """One line per (format, GEMM, kernel), one column per token count."""
    tokens = sorted({r.tokens for r in rows})
    lines: dict[tuple, dict[int, str]] = {}
    for r in rows:
        cell = f"{r.us:.1f}" if r.us is not None else "error"
        lines.setdefault((r.format, f"{r.gemm} {r.n}x{r.k}", r.kernel), {})[r.tokens] = cell
    columns = [Column("format", align="<"), Column("GEMM (N x K)", align="<")]
    columns += [Column("kernel", align="<")] + [Column(f"{t} tok (us)") for t in tokens]
    body = [[*key, *(cells.get(t, "") for t in tokens)] for key, cells in lines.items()]
    return text_table(columns, body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--formats", type=name_list, default=list(FORMATS))
    parser.add_argument("--tokens", type=int_list, default=list(TOKENS))
    parser.add_argument("--gemms", type=name_list, default=[g for g, _, _ in LLAMA3_8B_GEMMS])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    unknown = [f for f in args.formats if f not in FORMATS]
    if unknown:
        parser.error(f"--formats: unknown {unknown}; allowed: {', '.join(FORMATS)}")
    gemms = [g for g in LLAMA3_8B_GEMMS if g[0] in args.gemms]
    rows = measure(args.formats, args.tokens, gemms)
    print(table(rows))
    if args.json:
        import torch

        write_json(
            args.json,
            {"device": torch.cuda.get_device_name(), "rows": [asdict(r) for r in rows]},
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

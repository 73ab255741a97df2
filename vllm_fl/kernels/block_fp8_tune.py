"""Tune the block-FP8 GEMM's tile configs on this GPU and write the kernel library's tables.

For each weight shape [N, K] and token count it times every config of a search space (and
FlagGems' own choice) of FlagGems' block-FP8 kernel (`block_fp8.launch`) inside a CUDA graph;
the five fastest and FlagGems' are timed again, taking turns, and the fastest by median makes
the table that `block_fp8` loads (``--write`` writes it into ``block_fp8_tuned/``, the package
data). Triton compiles each config on first use; worker processes (``--workers``) compile them
first, so the timing process loads them from Triton's cache.

    python -m vllm_fl.kernels.block_fp8_tune --gemms 6144x4096,4096x4096 [--tokens 1,16,...]
        [--workers N] [--write] [--json F]

A chip vendor runs it once on its device for the projections of each FP8 model it serves.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import itertools
import multiprocessing
import statistics
import sys
from pathlib import Path

import torch

from vllm_fl.kernels import block_fp8, tuned
from vllm_fl.kernels.moe.tune import config_id, fastest, graph_us, int_list, write_json

TOKENS = "1,8,16,32,64,128,256,512,1024,2048,4096"
BLOCK = (128, 128)
#: tile rows worth trying at a token count: no wider than the rows there are (16 at least)
ROWS = {16: (16,), 64: (16, 32, 64), 256: (32, 64, 128), 1 << 30: (64, 128)}
SPACE = {
    "BLOCK_SIZE_N": (32, 64, 128, 256),
    "BLOCK_SIZE_K": (64, 128),
    "num_warps": (4, 8),
    "num_stages": (3, 4, 5),
}
FINALISTS = 5
ROUNDS = 5


def rows_for(tokens: int) -> tuple[int, ...]:
    return next(rows for limit, rows in ROWS.items() if tokens <= limit)


def search_space(tokens: int) -> list[dict]:
    """The configs tried at ``tokens`` rows, in a fixed order; tile-row groups only where there
    is more than one tile of rows."""
    configs = []
    for block_m, values in itertools.product(rows_for(tokens), itertools.product(*SPACE.values())):
        for group_m in (1, 8) if tokens > block_m else (1,):
            config = {"BLOCK_SIZE_M": block_m, **dict(zip(SPACE, values)), "GROUP_SIZE_M": group_m}
            configs.append({key: config[key] for key in tuned.CONFIG_KEYS})
    return configs


def parse_gemm(text: str) -> tuple[int, int]:
    """argparse type: "6144x4096" -> (6144, 4096), the weight's N x K in whole 128 blocks."""
    try:
        n, k = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not NxK (e.g. 6144x4096)") from None
    if n < 1 or k < 1 or k % BLOCK[1]:
        raise argparse.ArgumentTypeError(f"{text!r}: N, K positive and K a multiple of {BLOCK[1]}")
    return n, k


def inputs(n: int, k: int, tokens: int):
    """Random quantised operands of one GEMM: a, b, their block scales."""
    a = (torch.randn((tokens, k), device="cuda") * 0.5).to(torch.float8_e4m3fn)
    b = (torch.randn((n, k), device="cuda") * 0.5).to(torch.float8_e4m3fn)
    a_s = torch.rand((tokens, k // BLOCK[1]), device="cuda") * 1e-2 + 1e-3
    b_s = torch.rand((-(-n // BLOCK[0]), k // BLOCK[1]), device="cuda") * 1e-2 + 1e-3
    return a, b, a_s, b_s


def call(operands, config: dict | None):
    a, b, a_s, b_s = operands
    if config is None:  # FlagGems' own choice
        import flag_gems

        return lambda: flag_gems.w8a8_block_fp8_matmul(a, b, a_s, b_s, list(BLOCK), torch.bfloat16)
    return lambda: block_fp8.launch(a, b, a_s, b_s, BLOCK, torch.bfloat16, config)


def compile_configs(gemms, token_counts, configs) -> dict[tuple, str]:
    """Run each config once per shape (Triton compiles and caches it); the failed ones' errors."""
    failed = {}
    for config in configs:
        try:
            for n, k in gemms:
                for tokens in token_counts:
                    if config in search_space(tokens):
                        call(inputs(n, k, tokens), config)()
            torch.cuda.synchronize()
        except Exception as error:  # a config the compiler rejects (e.g. out of resources)
            failed[config_id(config)] = f"{type(error).__name__}: {str(error)[:200]}"
    return failed


def _compile_everywhere(args, configs: list[dict]) -> dict[tuple, str]:
    if args.workers < 1:
        return compile_configs(args.gemms, args.tokens, configs)
    context = multiprocessing.get_context("spawn")
    failed: dict[tuple, str] = {}
    with concurrent.futures.ProcessPoolExecutor(args.workers, mp_context=context) as pool:
        jobs = [
            pool.submit(compile_configs, args.gemms, args.tokens, configs[i :: args.workers])
            for i in range(args.workers)
        ]
        for job in jobs:
            failed.update(job.result())
    return failed


def tune(args) -> dict:
    """Per shape and token count: every config's GPU time, the finalists timed again, the
    fastest and FlagGems' own."""
    everything = {config_id(c): c for t in args.tokens for c in search_space(t)}
    print(f"{len(everything)} configs, {len(args.gemms)} shapes", flush=True)
    failed = _compile_everywhere(args, list(everything.values()))
    result = {"device": torch.cuda.get_device_name(), "block": list(BLOCK), "failed": len(failed)}
    result["rows"] = rows = []
    for (n, k), tokens in itertools.product(args.gemms, args.tokens):
        calls = 10 if tokens <= 512 else 3
        operands = inputs(n, k, tokens)
        swept = {
            config_id(c): graph_us(call(operands, c), calls, rounds=2)
            for c in search_space(tokens)
            if config_id(c) not in failed
        }
        ranked = sorted(swept, key=lambda cid: statistics.median(swept[cid]))
        finalists = [*ranked[:FINALISTS], None]
        again: dict = {cid: [] for cid in finalists}
        for _ in range(ROUNDS):
            for cid in finalists:
                again[cid] += graph_us(call(operands, everything.get(cid)), calls, rounds=1)
        best = fastest({cid: t for cid, t in again.items() if cid is not None})
        row = {
            "n": n,
            "k": k,
            "tokens": tokens,
            "best": everything[best],
            "best_us": round(statistics.median(again[best]), 2),
            "flag_gems_us": round(statistics.median(again[None]), 2),
        }
        rows.append(row)
        print(
            f"{n}x{k} {tokens:>5} tokens: best {row['best_us']:8.2f} us {best}, FlagGems' "
            f"{row['flag_gems_us']:8.2f} us",
            flush=True,
        )
        if args.json:  # a sweep cut short keeps what is done
            write_json(args.json, result)
    return result


def write_tables(result: dict) -> list[Path]:
    """The tables of ``result``, one per shape, written where `block_fp8` looks for them."""
    device = tuned.table_device(result["device"])
    block = tuple(result["block"])
    paths = []
    for (n, k), rows in itertools.groupby(result["rows"], key=lambda r: (r["n"], r["k"])):
        path = block_fp8.TABLE_DIR / block_fp8.table_name(n, k, device, block)
        tuned.write_table(path, {row["tokens"]: row["best"] for row in rows})
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vllm_fl.kernels.block_fp8_tune", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--gemms",
        type=lambda text: [parse_gemm(part) for part in text.split(",")],
        required=True,
        help="weight shapes NxK, comma-separated (e.g. 6144x4096,4096x14336)",
    )
    parser.add_argument("--tokens", type=int_list, default=TOKENS)
    parser.add_argument("--workers", type=int, default=8, help="compile processes (0: none)")
    parser.add_argument("--write", action="store_true", help="write the tables into the package")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if isinstance(args.tokens, str):
        args.tokens = int_list(args.tokens)
    if not torch.cuda.is_available():
        parser.error("tuning needs a CUDA device")
    result = tune(args)
    if args.write:
        for path in write_tables(result):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Tune the fused experts' GEMM configs on this GPU and write the kernel library's config table.

FlagGems picks ``fused_moe_kernel``'s tile config from a table it ships per device, else from a
default heuristic (FlagGems 5.0.2 has no CUDA table). This measures, for each token count, every
config of a search space (and FlagGems' own pick) running the library's whole fused experts
(``experts.fused_experts_in_plans``: alignment, both grouped GEMMs, activation, top-k sum)
inside a CUDA graph, as a compiled engine runs it: the fastest by median GPU time per token
count makes the table that ``tuned_configs`` loads (``--write`` writes it into ``tuned/``, the
package data). The five fastest of the sweep and FlagGems' pick are timed again, taking turns,
before one is chosen.

Triton compiles each config's kernels on first use; worker processes (``--workers``) compile
them first, so the timing process loads them from Triton's cache.

    python -m vllm_fl.kernels.moe.tune --experts E --intermediate N --hidden K --top-k T
        [--label NAME] [--dtype bfloat16] [--tokens 1,2,...] [--workers N] [--write] [--json F]

The experts' four sizes: number of experts, their intermediate size, the hidden size, experts
per token (``benchmarks/tune_moe.py --shape NAME`` gives them for a model of its shapes).

A chip vendor runs it once on its device for each MoE model shape it serves; the table goes
into the package.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import itertools
import json
import multiprocessing
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from vllm_fl.kernels import tuned
from vllm_fl.kernels.moe import experts, tuned_configs
from vllm_fl.kernels.tuned import table_json  # noqa: F401  (the tuner's API: the table's text)

TOKENS = "1,2,4,8,16,24,32,48,64,96,128,256,512,1024,1536,2048,3072,4096,8192"
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
#: the sweep: every combination whose pipelined tiles fit the shared memory
SPACE = {
    "BLOCK_SIZE_M": (16, 32, 64, 128),
    "BLOCK_SIZE_N": (64, 128, 256),
    "BLOCK_SIZE_K": (64, 128),
    "GROUP_SIZE_M": (1, 16),
    "num_warps": (4, 8),
    "num_stages": (3, 4),
}
SHARED_MEMORY = 227 * 1024  # bytes of shared memory per block on an H100 (sm_90)
FINALISTS = 5
ROUNDS = 5


@dataclasses.dataclass(frozen=True)
class ExpertShape:
    """The sizes of one MoE layer's experts that the tuning runs at."""

    name: str
    experts: int
    intermediate: int
    hidden: int
    top_k: int


#: the arguments that give an experts' shape, all four required
SIZES = ("experts", "intermediate", "hidden", "top_k")


def int_list(text: str) -> list[int]:
    """argparse type: "1,64,2048" -> [1, 64, 2048], each a positive integer."""
    values = []
    for part in text.split(","):
        try:
            value = int(part)
        except ValueError:
            value = 0
        if value <= 0:
            raise argparse.ArgumentTypeError(
                f"{part.strip()!r} in {text!r} is not a positive integer; expected a "
                "comma-separated list such as 1,64,2048"
            )
        values.append(value)
    return values


def expert_shape(parser: argparse.ArgumentParser, args: argparse.Namespace) -> ExpertShape:
    """The shape the arguments give, named ``--label``; missing sizes, sizes below one and more
    experts per token than experts are refused through ``parser.error``."""
    sizes = {name: getattr(args, name) for name in SIZES}
    missing = [f"--{name.replace('_', '-')}" for name, value in sizes.items() if value is None]
    if missing:
        parser.error(f"an experts' shape needs all four sizes: missing {', '.join(missing)}")
    bad = [f"--{name.replace('_', '-')} {value}" for name, value in sizes.items() if value < 1]
    if bad:
        parser.error(f"sizes must be positive: {', '.join(bad)}")
    if sizes["top_k"] > sizes["experts"]:
        parser.error(f"--top-k {sizes['top_k']} is more than --experts {sizes['experts']}")
    return ExpertShape(args.label, **sizes)


def search_space(element_size: int = 2, shared_memory: int = SHARED_MEMORY) -> list[dict]:
    """Every config of ``SPACE`` whose A and B tiles for all its pipeline stages fit in
    ``shared_memory`` bytes (tiles of ``element_size``-byte elements), in a fixed order."""
    configs = []
    for values in itertools.product(*SPACE.values()):
        config = dict(zip(SPACE, values))
        tiles = config["BLOCK_SIZE_K"] * (config["BLOCK_SIZE_M"] + config["BLOCK_SIZE_N"])
        if tiles * element_size * config["num_stages"] <= shared_memory:
            configs.append(config)
    return configs


def config_id(config: dict) -> tuple:
    """A config as a hashable value, its keys in ``tuned_configs.CONFIG_KEYS`` order."""
    return tuple(config[key] for key in tuned_configs.CONFIG_KEYS)


def fastest(timings: dict[tuple, list[float]]) -> tuple:
    """The config id with the lowest median of its timings (the first such in order)."""
    return min(timings, key=lambda cid: statistics.median(timings[cid]))


# -- on the GPU -----------------------------------------------------------------------------------


class Experts:
    """One MoE layer's experts of ``shape`` in ``dtype`` and calls of the library's fused
    experts through them with a given config."""

    def __init__(self, shape: ExpertShape, dtype: torch.dtype) -> None:
        torch.manual_seed(0)
        e, n, k = shape.experts, shape.intermediate, shape.hidden
        self.top_k = shape.top_k
        self.w1 = torch.randn(e, 2 * n, k, device="cuda", dtype=dtype) * 0.02
        self.w2 = torch.randn(e, k, n, device="cuda", dtype=dtype) * 0.02
        self.base = experts.flag_gems_kernels()
        if self.base is None or not self.base.takes_our_arguments:
            raise SystemExit("this FlagGems has no fused_moe_kernel the library launches")

    def gems_config(self, tokens: int) -> dict:
        """FlagGems' own pick for ``tokens`` tokens."""
        return experts.gems_config(self.w1, self.w2, self.top_k, self.w1.dtype, tokens)

    def inputs(self, tokens: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``tokens`` random tokens routed as a softmax router routes them: (hidden states,
        top-k weights float32, top-k ids int32)."""
        hidden = torch.randn(tokens, self.w1.size(2), device="cuda", dtype=self.w1.dtype)
        logits = torch.randn(tokens, self.w1.size(0), device="cuda", dtype=torch.float32)
        weights, ids = torch.topk(torch.softmax(logits, dim=-1), self.top_k)
        return hidden, weights, ids.to(torch.int32)

    def call(self, inputs: tuple, config: dict) -> Callable[[], torch.Tensor]:
        """A call of the fused experts on ``inputs`` (from ``inputs``) with ``config``."""
        key = experts.config_key(config)
        kernels = experts.ExpertKernels(
            self.base.gemm, self.base.gemm_params, lambda *shape: (config, key)
        )
        w1, w2, routed = self.w1, self.w2, self.w1.size(0)
        hidden, weights, ids = inputs
        steps = experts.STEPS

        def run() -> torch.Tensor:
            out = experts.fused_experts_in_plans(
                kernels, hidden, w1, w2, weights, ids, False, routed, **steps
            )
            if out is None:
                raise RuntimeError("fused_experts_in_plans did not take the call")
            return out

        return run


def graph_us(run: Callable[[], object], calls: int, rounds: int = 3) -> list[float]:
    """GPU µs per call of ``run``: ``calls`` calls captured in one CUDA graph, replayed
    ``rounds`` times after a first replay."""
    run()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            run()
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(rounds):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / calls)
    del graph
    return times


def _calls_per_graph(tokens: int) -> int:
    return 10 if tokens <= 512 else 3


def compile_configs(shape: ExpertShape, dtype_name: str, tokens: list[int], configs: list[dict]):
    """Run each config once at every token count (Triton compiles and caches its kernels);
    returns the ids of configs that failed, with the error."""
    failed = {}
    with experts.quiet_flag_gems():
        layer = Experts(shape, DTYPES[dtype_name])
        inputs = [layer.inputs(count) for count in tokens]
        for config in configs:
            try:
                for given in inputs:
                    layer.call(given, config)()
                torch.cuda.synchronize()
            except Exception as error:  # a config the compiler rejects (e.g. out of resources)
                failed[config_id(config)] = f"{type(error).__name__}: {str(error)[:200]}"
    return failed


def _compile_everywhere(args, shape: ExpertShape, configs: list[dict]) -> dict[tuple, str]:
    if args.workers < 1:
        return compile_configs(shape, args.dtype, args.tokens, configs)
    slices = [configs[i :: args.workers] for i in range(args.workers)]
    context = multiprocessing.get_context("spawn")
    failed: dict[tuple, str] = {}
    with concurrent.futures.ProcessPoolExecutor(args.workers, mp_context=context) as pool:
        jobs = [
            pool.submit(compile_configs, shape, args.dtype, args.tokens, part)
            for part in slices
            if part
        ]
        for job in jobs:
            failed.update(job.result())
    return failed


def tune(args, shape: ExpertShape) -> dict:
    """The sweep: per token count, every config's GPU time, the finalists timed again, the
    fastest and FlagGems' pick."""
    layer = Experts(shape, DTYPES[args.dtype])
    picks = {tokens: layer.gems_config(tokens) for tokens in args.tokens}
    candidates = {config_id(c): c for c in [*search_space(), *picks.values()]}
    print(f"{len(candidates)} configs x {len(args.tokens)} token counts", flush=True)
    failed = _compile_everywhere(args, shape, list(candidates.values()))
    for cid, error in failed.items():
        print(f"skipped {cid}: {error}", flush=True)
    result = {
        "device": torch.cuda.get_device_name(),
        "shape": shape.name,
        "experts": shape.experts,
        "intermediate": shape.intermediate,
        "hidden": shape.hidden,
        "top_k": shape.top_k,
        "dtype": args.dtype,
        "configs": len(candidates),
        "failed": len(failed),
        "rows": [],
    }
    rows = result["rows"]
    for tokens in args.tokens:
        calls = _calls_per_graph(tokens)
        inputs = layer.inputs(tokens)
        swept = {
            cid: graph_us(layer.call(inputs, config), calls, rounds=2)
            for cid, config in candidates.items()
            if cid not in failed
        }
        ranked = sorted(swept, key=lambda cid: statistics.median(swept[cid]))
        pick = config_id(picks[tokens])
        finalists = list(dict.fromkeys([*ranked[:FINALISTS], pick]))
        again: dict[tuple, list[float]] = {cid: [] for cid in finalists}
        for _ in range(ROUNDS):
            for cid in finalists:
                again[cid] += graph_us(layer.call(inputs, candidates[cid]), calls, rounds=1)
        best = fastest(again)
        row = {
            "tokens": tokens,
            "best": candidates[best],
            "best_us": round(statistics.median(again[best]), 2),
            "flag_gems": picks[tokens],
            "flag_gems_us": round(statistics.median(again[pick]), 2),
            "finalists": [
                {"config": candidates[cid], "us": round(statistics.median(again[cid]), 2)}
                for cid in finalists
            ],
        }
        rows.append(row)
        print(
            f"{tokens:>5} tokens: best {row['best_us']:9.2f} us {best}, FlagGems' "
            f"{row['flag_gems_us']:9.2f} us {pick}",
            flush=True,
        )
        if args.json:  # a sweep cut short keeps the token counts done
            write_json(args.json, result)
    return result


def write_json(path: Path, data: object) -> None:
    """Write a result file (parent folders created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")


def write_table(result: dict) -> Path:
    """The tuned table of ``result`` written where ``tuned_configs`` looks for it."""
    device = tuned_configs.table_device(result["device"])
    dtype = DTYPES[result["dtype"]]
    name = tuned_configs.table_name(result["experts"], result["intermediate"], device, dtype)
    path = tuned_configs.TABLE_DIR / name
    tuned.write_table(path, {row["tokens"]: row["best"] for row in result["rows"]})
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vllm_fl.kernels.moe.tune", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--experts", type=int, help="number of experts (with the three below)")
    parser.add_argument("--intermediate", type=int, help="an expert's intermediate size")
    parser.add_argument("--hidden", type=int, help="the model's hidden size")
    parser.add_argument("--top-k", type=int, help="experts per token")
    parser.add_argument("--label", default="custom", help="the shape's name in the results")
    parser.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPES))
    parser.add_argument("--tokens", type=int_list, default=TOKENS)
    parser.add_argument("--workers", type=int, default=min(15, max(1, (os.cpu_count() or 2) - 1)))
    parser.add_argument("--write", action="store_true", help="write the library's table")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    shape = expert_shape(parser, args)
    if not torch.cuda.is_available():
        print("the tuner needs a CUDA GPU (the configs are timed on it)", file=sys.stderr)
        return 2
    with experts.quiet_flag_gems():
        result = tune(args, shape)
    if args.write:
        print(f"wrote {write_table(result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

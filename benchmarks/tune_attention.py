"""Tune how the flagos impl runs batches of decodes on this GPU, and write the device's table.

For each model's attention shape and decode batch size it times vLLM's Triton
``unified_attention`` with its decode launch forced (`bench_attention`'s ``triton-2d`` and
``triton-3d-s8`` .. ``-s64``: each alone in a CUDA graph, its output checked once against the
reference) at every context length, and keeps the launch with the least geometric mean over the
contexts: a captured CUDA graph sees one batch size but every context length. ``--write`` stores
the table in ``vllm_fl/kernels/attention_tuned/`` (package data), which
``vllm_fl.kernels.attention`` loads for this device (``vllm_fl.kernels.attention_table``).

    python -m benchmarks.tune_attention [--models llama3-8b,qwen3-30b-a3b | --shapes 64x8x128,...]
        [--batches 1,2,4,...] [--contexts 512,2048] [--write] [--json F]

``--shapes`` names attention shapes by their query heads, kv heads and head size instead.

A chip vendor whose backend runs vLLM's Triton attention runs it once on its device.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import asdict
from pathlib import Path

from benchmarks import bench_attention as bench
from benchmarks.cli import int_list, name_list, refuse_unknown, write_json
from benchmarks.tables import Column, text_table
from vllm_fl.kernels import attention_table, tuned

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
CONTEXTS = (512, 2048)
#: the forced launches of vLLM's kernel: the 2D kernel and the 3D one with n segments
CANDIDATES = tuple(c for c in bench.CANDIDATES if c.kernel == "vllm_triton")


def attention_shape(text: str) -> bench.Model:
    """argparse type: "64x8x128" -> the attention shape of 64 query heads, 8 kv heads, head
    size 128."""
    parts = text.split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not HEADSxKV_HEADSxHEAD_SIZE (positive integers, e.g. 64x8x128)"
        )
    heads, kv_heads, head_size = map(int, parts)
    if heads % kv_heads:
        raise argparse.ArgumentTypeError(
            f"{text!r}: {heads} heads are not a multiple of {kv_heads}"
        )
    return bench.Model(text, heads, kv_heads, head_size)


def segments_of(candidate: bench.Candidate) -> int:
    """The table's segment count for ``candidate`` (``TWO_D``: the 2D kernel)."""
    return candidate.kwargs["segments"] or attention_table.TWO_D


def choose(rows: list[bench.Row], batches, contexts) -> dict[int, dict]:
    """Per batch size: the candidates' geometric-mean µs over ``contexts`` (a candidate with an
    error at any context is left out) and the fastest one's segment count."""
    times = {(r.shape, r.candidate): r.us for r in rows if r.us is not None}
    chosen = {}
    for seqs in batches:
        means = {}
        for candidate in CANDIDATES:
            us = [times.get((f"decode-b{seqs}-c{c}", candidate.name)) for c in contexts]
            if all(u is not None for u in us):
                means[candidate.name] = math.exp(sum(math.log(u) for u in us) / len(us))
        if means:
            best = min(means, key=means.get)
            segments = next(segments_of(c) for c in CANDIDATES if c.name == best)
            chosen[seqs] = {"segments": segments, "best": best, "geomean_us": means}
    return chosen


def rule_us(choice: dict, seqs: int, kv_heads: int) -> float | None:
    """The geometric-mean µs of vLLM's own choice for ``seqs`` decodes."""
    segments = attention_table.vllm_rule(seqs, kv_heads)
    name = next(c.name for c in CANDIDATES if segments_of(c) == segments)
    return choice["geomean_us"].get(name)


def report(models: list[dict]) -> str:
    """Per model and batch size: the chosen launch against vLLM's rule."""
    columns = [Column("model", align="<"), Column("batch"), Column("chosen", align="<")]
    columns += [Column("us", ".2f"), Column("vLLM's rule us", ".2f"), Column("speed-up", ".3f")]
    body = []
    for model in models:
        for seqs, choice in sorted(model["choices"].items(), key=lambda item: int(item[0])):
            best = choice["geomean_us"][choice["best"]]
            rule = rule_us(choice, int(seqs), model["kv_heads"])
            speedup = None if rule is None else rule / best
            body.append([model["name"], seqs, choice["best"], best, rule, speedup])
    return text_table(columns, body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    names = [m.name for m in bench.MODELS]
    parser.add_argument("--models", type=name_list, default=names, help=f"of {', '.join(names)}")
    parser.add_argument(
        "--shapes", type=lambda t: [attention_shape(p) for p in t.split(",")], default=None
    )
    parser.add_argument("--batches", type=int_list, default=list(BATCHES))
    parser.add_argument("--contexts", type=int_list, default=list(CONTEXTS))
    parser.add_argument("--write", action="store_true", help="write the device's tables")
    parser.add_argument("--json", type=Path, help="write the measurements to this file")
    args = parser.parse_args(argv)
    refuse_unknown(parser, "--models", args.models, names)

    import torch

    device = torch.device("cuda", torch.cuda.current_device())
    results = []
    models = args.shapes or [m for m in bench.MODELS if m.name in args.models]
    for model in models:
        shapes = [
            bench.Shape(f"decode-b{seqs}-c{context}", "decode", seqs, 1, context)
            for seqs in args.batches
            for context in args.contexts
        ]
        rows = bench.measure([model], shapes, CANDIDATES)
        choices = choose(rows, args.batches, args.contexts)
        table = {seqs: {"segments": c["segments"]} for seqs, c in choices.items()}
        name = attention_table.table_name(
            model.heads, model.kv_heads, model.head_size, tuned.device_name(device), "bfloat16"
        )
        if args.write and table:
            path = attention_table.TABLE_DIR / name
            tuned.write_table(path, table, attention_table.SCHEMA)
            print(f"wrote {path}", flush=True)
        results.append(
            {
                **asdict(model),
                "table": name,
                "choices": {str(seqs): c for seqs, c in choices.items()},
                "rows": [asdict(r) for r in rows],
            }
        )
    print(report(results))
    if args.json:
        write_json(
            args.json,
            {"device": torch.cuda.get_device_name(), "contexts": args.contexts, "models": results},
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

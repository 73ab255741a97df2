"""What the benchmarks share: the sizes they sweep, timers, medians, JSON results and tables.

Timers: `gpu_us` (triton's do_bench, eager or in a CUDA graph), `per_call_us` (wall and CUDA-event
time per call of a loop) and `interleaved_medians` (round-robin samples of several candidates, so
that load on the machine during the run affects each alike). Tables: `Column` describes one,
`text_table` lays rows out for a terminal, `markdown_table` for the README. Sweeps of
configurations run in worker processes: `refuse_unknown` checks the names, `worker_result` reads
a worker's result, `sweep_configs` runs, reports and keeps them one by one.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

#: token counts of the kernel sweep: decode batches up to DECODE_MAX_TOKENS, prefill beyond
TOKENS = (1, 8, 64, 256, 2048, 8192, 32768)
DECODE_MAX_TOKENS = 256
DTYPES = ("bfloat16", "float16")


# -- command lines --------------------------------------------------------------------------------


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


def name_list(text: str) -> list[str]:
    """argparse type: "a,b" -> ["a", "b"] (empty items refused)."""
    names = [part.strip() for part in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"{text!r} has an empty item; expected a,b,...")
    return names


# -- timing ---------------------------------------------------------------------------------------


def median(values: Iterable[float]) -> float:
    return statistics.median(values)


def quantile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile of sorted ``ordered`` (the element at that rank)."""
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bootstrap_median_ci(values: Sequence[float], draws: int = 2000) -> tuple[float, float]:
    """95% interval of the median of ``values`` by resampling them (fixed seed)."""
    rng = random.Random(0)
    medians = sorted(median(rng.choices(values, k=len(values))) for _ in range(draws))
    return quantile(medians, 0.025), quantile(medians, 0.975)


def gpu_us(fn: Callable[[], object], graph: bool) -> float:
    """Microseconds per call of `fn` on the GPU: triton's do_bench (launch included), or its
    CUDA-graph replay (launch excluded) with `graph`."""
    import triton.testing

    if graph:
        return triton.testing.do_bench_cudagraph(fn, rep=40) * 1000.0
    return triton.testing.do_bench(fn, warmup=10, rep=40) * 1000.0


def per_call_us(fn: Callable, args: tuple, iters: int, warmup: int = 10) -> tuple[float, float]:
    """(wall, GPU) microseconds per call of `fn(*args)` over `iters` calls in a row: wall time
    with the GPU kept busy (launch-bound at small sizes), and CUDA-event time."""
    import torch

    for _ in range(warmup):
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


def interleaved_medians(samplers: Sequence[Callable[[], float]], repeat: int) -> list[float]:
    """Median of `repeat` samples of each sampler, taken round-robin (one of each per round)."""
    samples: list[list[float]] = [[] for _ in samplers]
    for _ in range(repeat):
        for sampler, taken in zip(samplers, samples):
            taken.append(sampler())
    return [median(taken) for taken in samples]


# -- results --------------------------------------------------------------------------------------


def write_json(path: Path, data: object) -> None:
    """Write a result file (parent folders created), one key per line at the top levels."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")


def read_json(path: Path) -> object:
    return json.loads(Path(path).read_text())


# -- configurations run in worker processes ---------------------------------------------------


def refuse_unknown(parser: argparse.ArgumentParser, flag: str, given, allowed) -> None:
    """``parser.error`` naming the values of ``flag`` that ``allowed`` does not hold."""
    unknown = [name for name in given if name not in allowed]
    if unknown:
        parser.error(f"{flag}: unknown {', '.join(unknown)}; allowed: {', '.join(allowed)}")


def worker_result(argv: list[str], env: dict[str, str], prefix: str, timeout: float) -> dict:
    """Run a benchmark's worker process and return the JSON object it printed on the stdout
    line starting with ``prefix``; without one, ``{"error": its last output lines}``."""
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    for line in done.stdout.splitlines():
        if line.startswith(prefix):
            return json.loads(line[len(prefix) :])
    tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
    return {"error": " | ".join(tail)[-400:]}


def sweep_configs(
    configs: Iterable[str],
    run: Callable[[str], dict],
    report: Callable[[dict], None],
    json_path: Path | None,
) -> list[dict]:
    """``{"config": name, **run(name)}`` for each configuration in turn, each reported as it
    comes and the results so far written to ``json_path`` (a sweep cut short keeps them)."""
    results = []
    for name in configs:
        results.append({"config": name, **run(name)})
        report(results[-1])
        if json_path:
            write_json(json_path, results)
    return results


# -- tables ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """One table column: its title, a format spec for numbers (e.g. ".1f") and an alignment
    (">" right, "<" left). None in a cell prints as `missing`."""

    title: str
    fmt: str = ""
    align: str = ">"
    missing: str = "-"

    def cell(self, value: object) -> str:
        if value is None:
            return self.missing
        if isinstance(value, str):
            return value
        return format(value, self.fmt)


def _cells(columns: Sequence[Column], rows: Iterable[Sequence[object]]) -> list[list[str]]:
    out = []
    for row in rows:
        if len(row) != len(columns):
            raise ValueError(f"a row has {len(row)} cells for {len(columns)} columns: {row!r}")
        out.append([col.cell(value) for col, value in zip(columns, row)])
    return out


def text_table(columns: Sequence[Column], rows: Iterable[Sequence[object]], sep: str = "  ") -> str:
    """Rows under a header line, each column as wide as its widest cell."""
    cells = _cells(columns, rows)
    widths = [max([len(col.title)] + [len(r[i]) for r in cells]) for i, col in enumerate(columns)]

    def line(values: Sequence[str]) -> str:
        return sep.join(
            f"{v:{col.align}{w}}" for v, col, w in zip(values, columns, widths)
        ).rstrip()

    return "\n".join([line([c.title for c in columns])] + [line(r) for r in cells])


def markdown_table(columns: Sequence[Column], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub-flavoured Markdown table; numeric columns (">") right-aligned."""
    cells = _cells(columns, rows)
    head = "| " + " | ".join(c.title for c in columns) + " |"
    rule = "|" + "|".join("---:" if c.align == ">" else "---" for c in columns) + "|"
    return "\n".join([head, rule] + ["| " + " | ".join(r) + " |" for r in cells])

"""The benchmarks' timers, one per kind of time, and the statistics of their samples.

- `gpu_us`: GPU microseconds per call (triton's ``do_bench``, or its CUDA-graph replay, which
  leaves the launch out);
- `events_us`: GPU microseconds per call between CUDA events around calls made back to back;
- `kernel_us`: a kernel's time in a CUDA graph, or between CUDA events where it cannot be
  captured;
- `wall_us`: wall microseconds per call of calls made back to back on the host (for an op on the
  GPU: the host's cost of queuing it, the device drained before and after each sample);
- `interleaved_medians`: several candidates sampled round-robin, so that load on the machine
  during the run affects each alike.
"""

from __future__ import annotations

import random
import statistics
import timeit
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

#: samples of `wall_us` unless told otherwise; the median counts
REPEAT = 5


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


def bootstrap_ratio_ci(
    values: Sequence[float], base: Sequence[float], draws: int = 2000
) -> tuple[float, float]:
    """95% interval of median(``values``) / median(``base``), both resampled (fixed seed): two
    independent sets of samples, such as two engines' repeats."""
    rng = random.Random(0)
    ratios = sorted(
        median(rng.choices(values, k=len(values))) / median(rng.choices(base, k=len(base)))
        for _ in range(draws)
    )
    return quantile(ratios, 0.025), quantile(ratios, 0.975)


def gpu_us(fn: Callable[[], object], graph: bool = False) -> float:
    """Median GPU microseconds per call of `fn`: triton's do_bench (launch included), or with
    `graph` its CUDA-graph replay (launch excluded)."""
    import triton.testing

    if graph:
        return triton.testing.do_bench_cudagraph(fn, rep=40, return_mode="median") * 1000.0
    return triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median") * 1000.0


def events_us(fn: Callable[[], object], calls: int = 100, repeat: int = REPEAT) -> float:
    """Median over `repeat` samples of GPU microseconds per call between two CUDA events around
    `calls` calls of `fn` back to back (a kernel shorter than its launch shows the launch)."""
    import torch

    fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeat):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1000.0 / calls)
    return median(samples)


@dataclass(frozen=True)
class KernelTime:
    """µs per call; `method` "graph" (CUDA-graph replay) or "events" (CUDA events, the graph
    capture having failed with `note`)."""

    us: float
    method: str
    note: str | None = None


def kernel_us(fn: Callable[[], object]) -> KernelTime:
    """`fn`'s GPU time per call in a CUDA graph (`gpu_us`), or where it cannot be captured (a
    host synchronisation, an allocation the graph refuses) between CUDA events (`events_us`)."""
    try:
        return KernelTime(gpu_us(fn, graph=True), "graph")
    except Exception as exc:  # whatever broke the capture: time the kernel uncaptured
        return KernelTime(events_us(fn), "events", f"graph capture failed: {describe(exc)}")


def describe(exc: BaseException, limit: int = 160) -> str:
    """``Type: first line of the message`` (at most `limit` characters of it), for a result row."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:limit]}" if lines else type(exc).__name__


def wall_us(
    stmt: Callable[[], object] | str,
    number: int,
    repeat: int = REPEAT,
    namespace: dict | None = None,
    sync: Callable[[], object] | None = None,
) -> float:
    """Median over `repeat` samples of wall microseconds per call, each sample `number` calls
    in a row. `stmt` is a callable or a statement (timed inline, without a call's own cost,
    its names looked up in `namespace`); `sync` (e.g. ``torch.cuda.synchronize``) runs before
    and after each sample, outside the timed part."""
    timer = timeit.Timer(stmt, globals=namespace)
    samples = []
    for _ in range(repeat):
        if sync is not None:
            sync()
        samples.append(timer.timeit(number) / number * 1e6)
        if sync is not None:
            sync()
    return median(samples)


def interleaved_medians(samplers: Sequence[Callable[[], float]], repeat: int) -> list[float]:
    """Median of `repeat` samples of each sampler, taken round-robin (one of each per round)."""
    samples: list[list[float]] = [[] for _ in samplers]
    for _ in range(repeat):
        for sampler, taken in zip(samplers, samples):
            taken.append(sampler())
    return [median(taken) for taken in samples]

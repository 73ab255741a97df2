"""How much the host's speed differs between fresh processes on one machine, pinned or not.

Eager decode is bound by the host, so a process that happens to run on a slow core, or away
from its memory, makes its engine slower whatever the configuration. This starts ``--processes``
fresh Python processes in turn, each timing ``torch.empty(16, device="cuda")`` (small dispatcher
calls, what an eager step consists of) and a pure-Python loop, first unpinned and then pinned to
each CPU set given with ``--pin`` (``os.sched_setaffinity``, which the processes a benchmark
starts inherit)::

    python -m benchmarks.host_probe --processes 8 --pin 0-7 --json out.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from benchmarks.cli import write_json
from benchmarks.timing import median
from vllm_fl.testing.child import run_child

#: the probe, run as ``python -c _PROBE CPUS --result FILE`` (CPUS "" for unpinned)
_PROBE = """
import os, sys, time
from vllm_fl.testing.child import write_result
from vllm_fl.testing.engine import host_probe_us
if sys.argv[1]:
    os.sched_setaffinity(0, {int(cpu) for cpu in sys.argv[1].split(",")})
empty_us = host_probe_us()
t0 = time.perf_counter()
total = 0
for i in range(1_000_000):
    total += i
loop_ns = (time.perf_counter() - t0) / 1_000_000 * 1e9
cpu = os.sched_getcpu() if hasattr(os, "sched_getcpu") else None
write_result(sys.argv[3], {"empty_us": round(empty_us, 3), "python_loop_ns": round(loop_ns, 2),
                           "cpu": cpu})
"""
#: seconds a probe may take
TIMEOUT_S = 300


def parse_cpus(text: str) -> set[int]:
    """``0-3,8`` as a set of CPU numbers."""
    cpus: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def probe(cpus: set[int] | None) -> dict:
    """One fresh process's figures, pinned to ``cpus`` where given."""
    pinned = ",".join(map(str, sorted(cpus or ())))
    run = run_child([sys.executable, "-c", _PROBE, pinned], dict(os.environ), timeout=TIMEOUT_S)
    if not run.ok:
        raise RuntimeError("host probe failed:\n" + "\n".join(run.tail(10)))
    return run.result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--pin", action="append", default=[], metavar="CPUS")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    results = []
    for label in ["unpinned", *args.pin]:
        cpus = None if label == "unpinned" else parse_cpus(label)
        runs = [probe(cpus) for _ in range(args.processes)]
        empty = [run["empty_us"] for run in runs]
        loop = [run["python_loop_ns"] for run in runs]
        results.append({"cpus": label, "runs": runs})
        print(
            f"{label:>10}: torch.empty µs {' '.join(f'{v:.2f}' for v in empty)}"
            f" (median {median(empty):.2f}); python loop ns/iter"
            f" {' '.join(f'{v:.1f}' for v in loop)}"
        )
    if args.json:
        write_json(args.json, {"time": time.strftime("%Y-%m-%d %H:%M:%S"), "results": results})


if __name__ == "__main__":
    main()

"""How much the host's speed differs between fresh processes on one machine, pinned or not.

Eager decode is bound by the host, so a process that happens to run on a slow core, or away
from its memory, makes its engine slower whatever the configuration. This starts ``--processes``
fresh Python processes in turn, each timing ``torch.empty(16, device="cuda")`` (small dispatcher
calls, what an eager step consists of) and a pure-Python loop, first unpinned and then pinned to
each CPU set given with ``--pin`` (``os.sched_setaffinity``, which the processes a benchmark
starts inherit)::

    python benchmarks/host_probe.py --processes 8 --pin 0-7 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import median, write_json  # noqa: E402

_PROBE = """
import json, os, sys, time
sys.path.insert(0, {benchmarks!r})
from vllm_runner import host_probe_us
empty_us = host_probe_us()
t0 = time.perf_counter()
total = 0
for i in range(1_000_000):
    total += i
loop_ns = (time.perf_counter() - t0) / 1_000_000 * 1e9
print(json.dumps({{"empty_us": round(empty_us, 3), "python_loop_ns": round(loop_ns, 2),
                  "cpu": os.sched_getcpu() if hasattr(os, "sched_getcpu") else None}}))
""".format(
    benchmarks=str(Path(__file__).resolve().parent)
)


def parse_cpus(text: str) -> set[int]:
    """``0-3,8`` as a set of CPU numbers."""
    cpus: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def probe(cpus: set[int] | None) -> dict:
    """One fresh process's figures, pinned to ``cpus`` where given."""
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    output = subprocess.run(
        [sys.executable, "-c", _PROBE],
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=pin,
    ).stdout
    return json.loads(output.strip().splitlines()[-1])


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

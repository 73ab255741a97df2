"""The session's vLLM runs and their timings (measured, never asserted), printed at the end.

A run is made by whichever pytest-xdist worker asks first; it records itself in the session's
shared folder, and the controller prints them all in its terminal summary.
"""

from __future__ import annotations

import json

from tests.support import shared

RUNS_FILE = "e2e-runs.jsonl"


def record(name: str, run) -> None:
    """Note ``run`` (a ``VllmRun``) made under ``name``."""
    with open(shared.shared_dir() / RUNS_FILE, "a") as log:
        log.write(json.dumps([name, run.wall_s, run.result]) + "\n")


def summary(terminalreporter) -> None:
    """Print the end-to-end runs' timings."""
    try:
        lines = (shared.shared_dir() / RUNS_FILE).read_text().splitlines()
    except (OSError, RuntimeError):
        return
    if not lines:
        return
    terminalreporter.section("vLLM end-to-end runs (tiny models)")
    terminalreporter.write_line(
        f"{'run':<28} {'wall s':>7} {'engine start s':>15} {'gen s':>7} {'tok/s':>7}  "
        "dtype     platform"
    )
    for name, wall_s, r in map(json.loads, lines):

        def cell(key: str, width: int, fmt: str) -> str:
            # a run with a task (a census, a scoring) reports its own keys instead of timings
            value = r.get(key)
            return (
                f"{value:>{width}{fmt}}" if isinstance(value, (int, float)) else f"{'-':>{width}}"
            )

        platform = str(r.get("platform", "-")).rsplit(".", 1)[-1]
        terminalreporter.write_line(
            f"{name:<28} {wall_s:>7.1f} {cell('init_s', 15, '.1f')} "
            f"{cell('generate_s', 7, '.3f')} {cell('tokens_per_s', 7, '.1f')}  "
            f"{str(r.get('dtype', '-')):<9} {platform}"
        )

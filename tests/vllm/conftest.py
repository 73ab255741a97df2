"""End-to-end fixtures: the tiny model (built once per session) and vLLM runs memoised by
name, so several tests assert on one run; their timings are printed in the terminal summary."""

from __future__ import annotations

from pathlib import Path

import pytest
from vllm_fl.testing.models import build_tiny_llama
from vllm_fl.testing.launch import VllmRun, run_vllm

_E2E_RUNS: list[tuple[str, VllmRun]] = []


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def vllm_runs(tiny_model):
    """`vllm_runs(name, env, mode=..., model=...)`: runs vLLM (on the tiny Llama unless `model`
    says) once per session per name, then reuses it."""
    cache: dict[str, VllmRun] = {}

    def get(name: str, env: dict[str, str], model: Path | None = None, **kwargs) -> VllmRun:
        if name not in cache:
            cache[name] = run_vllm(model or tiny_model, env, **kwargs)
            _E2E_RUNS.append((name, cache[name]))
        return cache[name]

    return get


def pytest_terminal_summary(terminalreporter):
    """Print the end-to-end runs' timings (measured, never asserted)."""
    if not _E2E_RUNS:
        return
    terminalreporter.section("vLLM end-to-end runs (tiny models)")
    terminalreporter.write_line(
        f"{'run':<28} {'wall s':>7} {'engine start s':>15} {'gen s':>7} {'tok/s':>7}  "
        "dtype     platform"
    )
    for name, run in _E2E_RUNS:
        r = run.result

        def cell(key: str, width: int, fmt: str) -> str:
            # a run with a task (a census, a scoring) reports its own keys instead of timings
            value = r.get(key)
            return (
                f"{value:>{width}{fmt}}" if isinstance(value, (int, float)) else f"{'-':>{width}}"
            )

        platform = str(r.get("platform", "-")).rsplit(".", 1)[-1]
        terminalreporter.write_line(
            f"{name:<28} {run.wall_s:>7.1f} {cell('init_s', 15, '.1f')} "
            f"{cell('generate_s', 7, '.3f')} {cell('tokens_per_s', 7, '.1f')}  "
            f"{str(r.get('dtype', '-')):<9} {platform}"
        )

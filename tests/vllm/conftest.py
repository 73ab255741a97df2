"""End-to-end fixtures: the tiny model (built once per session) and vLLM runs memoised by
name, so several tests assert on one run, also across pytest-xdist's workers
(`tests.support.shared`); their timings are printed in the terminal summary."""

from __future__ import annotations

from pathlib import Path

import pytest
from vllm_fl.testing.models import build_tiny_llama
from vllm_fl.testing.launch import VllmRun, run_vllm

from tests.support import e2e_runs, shared


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    return shared.folder_once("tiny-llama", build_tiny_llama)


@pytest.fixture(scope="session")
def vllm_runs(tiny_model):
    """`vllm_runs(name, env, mode=..., model=...)`: runs vLLM (on the tiny Llama unless `model`
    says) once per session per name and model, then reuses it."""
    cache: dict[str, VllmRun] = {}

    def get(name: str, env: dict[str, str], model: Path | None = None, **kwargs) -> VllmRun:
        model = model or tiny_model
        if name not in cache:

            def make() -> VllmRun:
                run = run_vllm(model, env, **kwargs)
                e2e_runs.record(name, run)
                return run

            cache[name] = shared.once(f"vllm run {name} on {model}", make)
        return cache[name]

    return get

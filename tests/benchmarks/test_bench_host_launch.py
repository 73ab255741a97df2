"""The CPU host-launch benchmark times every flagos impl's own path, not a fallback: with the
launches stubbed, no call reaches FlagGems (not installed here) or raises, and the stubs are
gone afterwards."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")

from benchmarks import bench_host_launch  # noqa: E402
from vllm_fl.kernels import launch  # noqa: E402
from vllm_fl.kernels.moe import experts  # noqa: E402


def test_every_case_runs_the_backends_own_path_and_the_stubs_are_undone(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "flag_gems", None)  # a fallback would raise
    originals = (launch.on_current_gpu, launch.plans_for, launch.plans_of)
    original_kernels = experts.flag_gems_kernels
    rows = bench_host_launch.measure(repeat=1, number=1)
    assert [row["op"] for row in rows] == list(bench_host_launch.cases())
    assert all(row["us"] > 0 for row in rows)
    assert (launch.on_current_gpu, launch.plans_for, launch.plans_of) == originals
    assert experts.flag_gems_kernels is original_kernels

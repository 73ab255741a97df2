"""``benchmarks.multi_gpu``: the per-worker census of a profiler trace, and FLAGCX_PATH reaching
only the configuration that asks for FlagCX."""

from __future__ import annotations

import gzip
import json

import pytest

from benchmarks import multi_gpu


def _trace(path, names):
    events = [{"cat": "kernel", "name": name} for name in names]
    events.append({"cat": "cpu_op", "name": "void vllm::not_a_kernel<float>(float*)"})
    with gzip.open(path, "wt") as handle:
        json.dump({"traceEvents": events}, handle)
    return str(path)


def test_worker_kernels_counts_compiled_kernels_per_trace(tmp_path):
    rank0 = _trace(
        tmp_path / "rank0.json.gz",
        [
            "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 2>(vllm::RankData*)",
            "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 2>(vllm::RankData*)",
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            "_rms_norm_kernel",
        ],
    )
    rank1 = _trace(tmp_path / "rank1.json.gz", ["_rms_norm_kernel"])
    counts = multi_gpu.worker_kernels([rank0, rank1])
    assert counts[0] == {
        "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 2>(vllm::RankData*)": 2,
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)": 1,
    }
    assert counts[1] == {}


def test_flagcx_path_reaches_only_the_flagcx_configuration(monkeypatch):
    monkeypatch.setenv("FLAGCX_PATH", "/inherited")
    assert "FLAGCX_PATH" not in multi_gpu._config_env("plugin", {}, "/opt/flagcx")
    env = multi_gpu._config_env("flagcx", {}, "/opt/flagcx")
    assert env["FLAGCX_PATH"] == "/opt/flagcx"
    assert env["VLLM_FL_DENY_VENDORS"] == "cuda"
    with pytest.raises(SystemExit, match="--flagcx-path"):
        multi_gpu._config_env("flagcx", {}, None)

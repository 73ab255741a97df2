"""trace_engine's reading of an engine core's Chrome trace: GPU busy time, threads, top calls."""

from __future__ import annotations

import gzip
import json

from benchmarks import trace_engine


def _event(cat: str, name: str, ts: float, dur: float, tid: int = 1) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 7, "tid": tid}


def test_overlapping_intervals_count_once():
    assert trace_engine._union_us([(0, 10), (5, 15), (20, 30), (21, 22)]) == 25
    assert trace_engine._union_us([]) == 0


def test_gpu_idle_share_is_the_window_the_gpu_spent_without_work():
    events = [
        _event("cpu_op", "step", 0, 1000),
        _event("kernel", "a", 100, 300),
        _event("kernel", "b", 200, 300),  # overlaps a: busy 100..500
        _event("gpu_memcpy", "Memcpy HtoD", 900, 100),
        _event("cuda_runtime", "cudaStreamSynchronize", 600, 250),
        _event("cuda_runtime", "cudaLaunchKernel", 50, 10),
        {"ph": "i", "name": "marker", "ts": 5000},  # not a complete event: ignored
    ]
    summary = trace_engine.summarize(events, steps=2)
    assert summary["wall_ms_per_step"] == 0.5
    assert summary["gpu_busy_ms_per_step"] == 0.25
    assert summary["gpu_idle_share"] == 0.5
    assert summary["top_runtime_calls"][0] == ["cudaStreamSynchronize", 0.125, 0.5]
    assert [row[0] for row in summary["top_kernels"]] == ["a", "b", "Memcpy HtoD"]


def test_host_threads_are_told_apart_and_python_frames_of_ours_listed():
    events = [
        _event("cpu_op", "step", 0, 400, tid=1),
        _event("python_function", "vllm_fl/dispatch/manager.py(10): call", 0, 300, tid=1),
        _event("python_function", "vllm/v1/engine/core.py(5): step", 0, 400, tid=1),
        _event("cpu_op", "poll", 100, 100, tid=2),
        _event("kernel", "k", 0, 100),
        {**_event("gpu_user_annotation", "execute_model", 0, 100), "pid": 0, "tid": 7},
    ]
    summary = trace_engine.summarize(events, steps=1)
    assert summary["threads_ms_per_step"] == {"7/1": 0.4, "7/2": 0.1}
    assert summary["top_our_functions"] == [["vllm_fl/dispatch/manager.py(10): call", 0.3, 1.0]]


def test_gzipped_and_plain_traces_read_alike(tmp_path):
    events = [_event("kernel", "k", 0, 1)]
    plain, packed = tmp_path / "t.json", tmp_path / "t.json.gz"
    plain.write_text(json.dumps({"traceEvents": events}))
    with gzip.open(packed, "wt") as handle:
        json.dump({"traceEvents": events}, handle)
    assert trace_engine.read_trace(str(plain)) == trace_engine.read_trace(str(packed)) == events

"""benchmarks.bench_verify on the CPU: the reference timed as another backend's impl, verified
against itself: every call verified, none over tolerance (a cache write included)."""

from __future__ import annotations

import pytest

from benchmarks import bench_verify


@pytest.fixture(autouse=True)
def cpu_platform(monkeypatch):
    monkeypatch.setenv("VLLM_FL_PLATFORM", "cpu")


def test_the_reference_verified_against_itself_is_clean(capsys):
    rows = bench_verify.run(["rms_norm", "reshape_and_cache_flash"], [1], "float32", "cpu", calls=2)
    assert [(r["op"], r["over_tolerance"], r["not_verified"]) for r in rows] == [
        ("rms_norm", 0, 0),
        ("reshape_and_cache_flash", 0, 0),
    ]
    # the 3 warm-up calls and the 2 timed ones
    assert all(r["verified"] == 5 and r["impl"] == "reference.torch" for r in rows)
    assert "reshape_and_cache_flash" in capsys.readouterr().out

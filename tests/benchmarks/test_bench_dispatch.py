"""bench_dispatch runs on the CPU: every path is timed, printed and written as JSON."""

from __future__ import annotations

from benchmarks import bench_dispatch
from benchmarks.cli import read_json

PATHS = [
    "direct impl call",
    "layer.forward_oot(x)",
    "bound impl (MethodType)",
    "bound forward_oot(x)",
    "trampoline (2 candidates)",
    "call_op(op, layer, x)",
    "direct function impl",
    "replaced function mod.fn(x)",
    "manager.call(op, layer, x)",
    "fallback (steady state)",
    "fallback (reselect+raise)",
    "forward_oot, compile_prefer",
]


def test_every_path_is_timed_and_written(tmp_path, capsys):
    path = tmp_path / "dispatch.json"
    assert bench_dispatch.main(["--repeat", "1", "--number", "200", "--json", str(path)]) == 0
    result = read_json(path)
    assert (result["repeat"], result["number"]) == (1, 200)
    assert [row["path"] for row in result["rows"]] == PATHS
    base = result["rows"][0]["ns"]
    for row in result["rows"]:
        assert row["ns"] > 0
        assert abs(row["overhead_ns"] - (row["ns"] - base)) < 0.11
    out = capsys.readouterr().out
    assert out.startswith(f"Python {result['python']}, median of 1 runs")
    assert all(name in out for name in PATHS)

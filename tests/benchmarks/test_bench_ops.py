"""bench_ops on a machine without a GPU: its command line, tables and plots of earlier results."""

from __future__ import annotations

import sys

from benchmarks import bench_ops
import pytest
from benchmarks.bench_ops import load_report

RESULTS = bench_ops.Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def test_out_is_the_json_flag_and_tokens_and_dtypes_are_checked(capsys):
    parser = bench_ops.build_parser()
    args = parser.parse_args(["--ops", "a,b", "--tokens", "1,64,2048", "--out", "f.json"])
    assert (args.ops, args.tokens, str(args.json)) == (["a", "b"], [1, 64, 2048], "f.json")
    assert str(parser.parse_args(["--json", "g.json"]).json) == "g.json"
    with pytest.raises(SystemExit):
        bench_ops.main(["--dtypes", "int8"])
    assert "--dtypes: int8 unknown; allowed: bfloat16, float16, float32" in capsys.readouterr().err


def test_without_a_gpu_it_says_so_and_measures_nothing(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(bench_ops.torch.cuda, "is_available", lambda: False)
    assert bench_ops.main(["--ops", "rms_norm", "--out", str(tmp_path / "r.json")]) == 0
    assert "no CUDA device" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


def test_plot_only_without_matplotlib_says_how_to_install_it(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    plot = tmp_path / "p.png"
    rc = bench_ops.main(["--plot-only", str(RESULTS / "h100_moe_ops.json"), "--plot", str(plot)])
    out, err = capsys.readouterr()
    assert rc == 1 and not plot.exists()
    assert "matplotlib is not installed" in err and "pip install .[bench]" in err
    assert "fused_experts" in out and "op_backends:" in out


def test_table_lists_every_point_and_the_failures_after_it():
    report = load_report(RESULTS / "h100_ops.json")
    report.rows[0].error, report.rows[0].eager_us = "RuntimeError: boom", None
    lines = bench_ops.format_table(report).splitlines()
    assert len(lines) == 3 + len(report.rows)
    assert lines[-1].startswith(f"error: {report.rows[0].op} ") and lines[-1].endswith("boom")


def test_the_proposed_policy_orders_backends_by_graph_time():
    text, notes = bench_ops.propose_policy(load_report(RESULTS / "h100_moe_ops.json"))
    lines = text.splitlines()
    assert lines[0] == "op_backends:"
    assert "  moe_align_block_size: [vendor:cuda, flagos, reference]" in lines
    assert "  topk_softmax: [flagos, vendor:cuda, reference]" in lines

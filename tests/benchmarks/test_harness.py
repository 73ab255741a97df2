"""The benchmarks' shared sizes, medians, JSON results and tables."""

from __future__ import annotations

import argparse

import harness
import pytest
from harness import Column


def test_int_list_parses_token_counts_and_names_a_bad_item():
    assert harness.int_list("1,64,2048") == [1, 64, 2048]
    for bad in ("1,x", "0", "1,,2", "-4"):
        with pytest.raises(argparse.ArgumentTypeError, match="is not a positive integer"):
            harness.int_list(bad)


def test_name_list_refuses_empty_items():
    assert harness.name_list("a, b") == ["a", "b"]
    with pytest.raises(argparse.ArgumentTypeError, match="empty item"):
        harness.name_list("a,,b")


def test_interleaved_medians_take_one_sample_of_each_per_round():
    calls: list[str] = []
    values = {"a": iter([5.0, 1.0, 3.0]), "b": iter([10.0, 30.0, 20.0])}

    def sampler(name):
        def sample():
            calls.append(name)
            return next(values[name])

        return sample

    assert harness.interleaved_medians([sampler("a"), sampler("b")], repeat=3) == [3.0, 20.0]
    assert calls == ["a", "b"] * 3


def test_json_results_round_trip(tmp_path):
    path = tmp_path / "deep" / "r.json"
    harness.write_json(path, {"rows": [1, 2]})
    assert harness.read_json(path) == {"rows": [1, 2]}
    assert path.read_text().endswith("}\n")


def test_text_table_aligns_columns_and_prints_missing_values():
    cols = [Column("name", align="<"), Column("us", ".1f"), Column("n")]
    assert harness.text_table(cols, [("a", 1.25, 3), ("long", None, 10)]).splitlines() == [
        "name   us   n",
        "a     1.2   3",
        "long    -  10",
    ]


def test_markdown_table_right_aligns_numeric_columns():
    cols = [Column("op", align="<"), Column("us", ".1f")]
    assert harness.markdown_table(cols, [("x", 2.0)]).splitlines() == [
        "| op | us |",
        "|---|---:|",
        "| x | 2.0 |",
    ]


def test_a_row_of_the_wrong_width_is_refused():
    with pytest.raises(ValueError, match="a row has 1 cells for 2 columns"):
        harness.text_table([Column("a"), Column("b")], [("x",)])


def test_a_workers_result_is_the_json_after_its_prefix_or_its_last_lines():
    import os
    import sys

    env = dict(os.environ)
    script = "print('engine log'); print('RESULT {\"a\": 1}'); print('after')"
    ok = harness.worker_result([sys.executable, "-c", script], env, "RESULT ", timeout=60)
    assert ok == {"a": 1}
    failed = "print('loading'); raise SystemExit('no GPU')"
    error = harness.worker_result([sys.executable, "-c", failed], env, "RESULT ", timeout=60)
    assert error == {"error": "loading | no GPU"}


def test_a_sweep_names_each_result_and_keeps_them_as_it_goes(tmp_path):
    reported, path = [], tmp_path / "out" / "sweep.json"

    def run(name):
        assert harness.read_json(path) == reported if reported else not path.exists()
        return {"ms": len(name)}

    results = harness.sweep_configs(["a", "bcd"], run, reported.append, path)
    assert results == reported == [{"config": "a", "ms": 1}, {"config": "bcd", "ms": 3}]
    assert harness.read_json(path) == results


def test_unknown_names_are_refused_with_the_allowed_ones(capsys):
    parser = argparse.ArgumentParser()
    harness.refuse_unknown(parser, "--configs", ["a"], {"a": 1, "b": 2})
    with pytest.raises(SystemExit):
        harness.refuse_unknown(parser, "--configs", ["a", "x"], {"a": 1, "b": 2})
    assert "--configs: unknown x; allowed: a, b" in capsys.readouterr().err

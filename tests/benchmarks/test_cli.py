"""The benchmarks' argument types, name checks and result files."""

from __future__ import annotations

import argparse

import pytest

from benchmarks import cli


def test_int_list_parses_token_counts_and_names_a_bad_item():
    assert cli.int_list("1,64,2048") == [1, 64, 2048]
    for bad in ("1,x", "0", "1,,2", "-4"):
        with pytest.raises(argparse.ArgumentTypeError, match="is not a positive integer"):
            cli.int_list(bad)


def test_name_list_refuses_empty_items():
    assert cli.name_list("a, b") == ["a", "b"]
    with pytest.raises(argparse.ArgumentTypeError, match="empty item"):
        cli.name_list("a,,b")


def test_json_results_round_trip(tmp_path):
    path = tmp_path / "deep" / "r.json"
    cli.write_json(path, {"rows": [1, 2]})
    assert cli.read_json(path) == {"rows": [1, 2]}
    assert path.read_text().endswith("}\n")


def test_unknown_names_are_refused_with_the_allowed_ones(capsys):
    parser = argparse.ArgumentParser()
    cli.refuse_unknown(parser, "--configs", ["a"], {"a": 1, "b": 2})
    with pytest.raises(SystemExit):
        cli.refuse_unknown(parser, "--configs", ["a", "x"], {"a": 1, "b": 2})
    assert "--configs: unknown x; allowed: a, b" in capsys.readouterr().err

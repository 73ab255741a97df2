"""The child-process protocol: an answer is a result file, written whole; a resident child
answers once per command, and one that exits is an error that shows its output."""

from __future__ import annotations

import sys

import pytest

from vllm_fl.testing.child import ChildError, ResidentChild, run_child, write_result

ONE_SHOT = """
import sys
from vllm_fl.testing.child import write_result
print("a log line that looks like {'a': 2}")
write_result(sys.argv[-1], {"a": 1})
"""

RESIDENT = """
import argparse, sys
from vllm_fl.testing.child import add_result_argument, answer_commands
parser = argparse.ArgumentParser()
add_result_argument(parser)
args = parser.parse_args()
answer_commands(sys.stdin, args.result, {"ready": True},
                {"double": lambda words: {"value": 2 * int(words[1])}})
"""


def test_an_answer_is_written_whole_and_replaces_the_last(tmp_path):
    path = tmp_path / "result.json"
    write_result(path, {"a": 1})
    write_result(path, {"b": 2})
    assert path.read_text() == '{"b": 2}' and list(tmp_path.iterdir()) == [path]


def test_a_one_shot_child_answers_in_its_file_not_on_stdout():
    done = run_child([sys.executable, "-c", ONE_SHOT], {}, timeout=60)
    assert done.ok and done.result == {"a": 1}
    assert done.lines("a log line")


def test_a_child_that_fails_has_no_answer_and_keeps_its_output():
    done = run_child(
        [sys.executable, "-c", "print('loading'); raise SystemExit('no GPU')"], {}, timeout=60
    )
    assert not done.ok and done.result is None and done.returncode == 1
    assert sorted(done.tail(2)) == ["loading", "no GPU"]


def test_a_resident_child_answers_each_command(tmp_path):
    child = ResidentChild("double", [sys.executable, "-c", RESIDENT], {}, tmp_path / "log")
    try:
        assert child.answer(60) == {"ready": True}
        assert child.ask("double 21", 60) == {"value": 42}
        assert "unknown command 'halve'" in child.ask("halve 4", 60)["error"]
    finally:
        assert child.close(60) is None  # it answers nothing to quit
    assert child.proc.returncode == 0


def test_a_resident_child_that_exits_is_an_error_with_its_log(tmp_path):
    script = "print('cannot start'); raise SystemExit(3)"
    child = ResidentChild("broken", [sys.executable, "-c", script], {}, tmp_path / "log")
    with pytest.raises(ChildError, match="broken: no answer \\(exit status 3\\)\n.*cannot start"):
        child.answer(60)
    child.close(10)

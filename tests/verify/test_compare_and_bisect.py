"""The pure parts of bring-up mode: comparing results, merging reports, bisecting ops."""

from __future__ import annotations

import json
import math

import pytest
import torch

from vllm_fl.dispatch import ConfigError, load_config
from vllm_fl.verify.bisect import find_culprits, first_divergence
from vllm_fl.verify.compare import compare
from vllm_fl.verify.record import Recorder
from vllm_fl.verify.report import format_report, merge, read_dir, write


def test_compare_uses_the_parity_rule_and_integers_exactly():
    e = torch.tensor([1.0, 2.0, -4.0], dtype=torch.float64)
    d = compare(e + torch.tensor([0.0, 1e-3, 0.0], dtype=torch.float64), e, atol=2e-3, rtol=0.0)
    assert math.isclose(d.max_abs, 1e-3, rel_tol=1e-6) and not d.exceeded
    d = compare(e + torch.tensor([0.0, 0.0, 0.1]), e, atol=0.0, rtol=0.01)
    assert d.exceeded and math.isclose(d.ratio, 0.1 / 0.04, rel_tol=1e-6)
    assert math.isclose(d.max_rel, 0.1 / 4, rel_tol=1e-6)
    ids = torch.tensor([3, 1])
    assert compare(torch.tensor([3, 2]), ids, atol=10.0, rtol=10.0).exceeded
    assert not compare(ids.clone(), ids, atol=0.0, rtol=0.0).exceeded


def test_compare_notes_what_no_number_says():
    e = torch.zeros(2, 3)
    assert "shape (3, 2), reference (2, 3)" in compare(torch.zeros(3, 2), e, 1.0, 1.0).notes[0]
    nan = torch.tensor([float("nan"), 0.0])
    assert compare(nan, torch.zeros(2), 1.0, 1.0).exceeded
    assert compare((e, None), (e, None), 0.0, 0.0).exceeded is False
    assert compare((e, e), (e, None), 0.0, 0.0).exceeded


def test_reports_merge_over_processes_through_json_files(tmp_path):
    from vllm_fl.verify.compare import Diff

    for pid, err in ((1, 0.5), (2, 2.0)):
        rec = Recorder()
        rec.seen("silu_and_mul", "vendor.x")
        rec.add(
            "silu_and_mul",
            "vendor.x",
            "model.layers.0.mlp.act_fn",
            "x=4x8",
            "float32",
            (1.0, 0.0),
            Diff(err, err, err),
            1,
            1,
        )
        rec.add(
            "rms_norm",
            "vendor.x",
            "model.norm",
            "x=4x8",
            "float32",
            (1.0, 0.0),
            Diff(math.inf, math.inf, math.inf, ["shape"]),
            1,
            1,
        )
        path = tmp_path / f"verify-{pid}.json"
        path.write_text(json.dumps(rec.to_json(pid=pid)))
    report = read_dir(tmp_path)
    assert [p["pid"] for p in report.processes] == [1, 2]
    row = next(r for r in report.rows if r.op == "silu_and_mul")
    assert (row.calls, row.exceeded, row.max_abs) == (2, 1, 2.0)
    assert report.culprits() == ["rms_norm", "silu_and_mul"]  # worst first
    text = format_report(report)
    assert text.index("rms_norm") < text.index("silu_and_mul") and "inf" in text
    written = write(tmp_path / "new", {"rows": [], "ops": {}})
    assert (
        written.name.startswith("verify-") and merge([json.loads(written.read_text())]).rows == []
    )


def test_bisection_halves_then_tries_ops_one_at_a_time():
    asked = []

    def changes(culprits):
        def answer(group):
            asked.append(group)
            return culprits(set(group))

        return answer

    ops = ["a", "b", "c", "d", "e"]
    found = find_culprits(ops, changes(lambda g: "d" in g))
    assert found.culprits == [["d"]] and len(found.tried) <= 7
    found = find_culprits(ops, changes(lambda g: "a" in g or "e" in g))
    assert found.culprits == [["a"], ["e"]]
    # b and c change the tokens only together
    found = find_culprits(ops, changes(lambda g: {"b", "c"} <= g))
    assert found.culprits == [["a", "b", "c", "d", "e"]]
    assert find_culprits(ops, changes(lambda g: False)).culprits == []


def test_first_divergence_is_the_earliest_position():
    assert first_divergence([[1, 2, 3], [4, 5, 6]], [[1, 2, 3], [4, 5, 6]]) is None
    assert first_divergence([[1, 2, 3], [4, 5, 6]], [[1, 2, 9], [4, 0, 6]]) == (1, 1)
    assert first_divergence([[1, 2]], [[1, 2, 3]]) == (0, 2)


@pytest.mark.parametrize(
    "env, message",
    [
        ({"VLLM_FL_VERIFY": "rms norm"}, "VLLM_FL_VERIFY: invalid op name 'rms norm'"),
        ({"VLLM_FL_VERIFY_EVERY": "-1"}, "VLLM_FL_VERIFY_EVERY='-1': expected a whole number"),
        ({"VLLM_FL_VERIFY_STEPS": "many"}, "VLLM_FL_VERIFY_STEPS='many': expected a whole number"),
    ],
)
def test_invalid_settings_are_clear_errors(env, message):
    with pytest.raises(ConfigError, match=message):
        load_config({"VLLM_FL_PLATFORM": "cpu", **env})


def test_settings_values(tmp_path):
    cfg = load_config({"VLLM_FL_PLATFORM": "cpu"})
    assert (cfg.verify, cfg.verify_every, cfg.verify_steps, cfg.verify_report) == (
        False,
        1,
        0,
        None,
    )
    cfg = load_config(
        {
            "VLLM_FL_PLATFORM": "cpu",
            "VLLM_FL_VERIFY": "RMS_norm, silu_and_mul",
            "VLLM_FL_VERIFY_REPORT": str(tmp_path / "reports"),
        }
    )
    assert cfg.verify == frozenset({"rms_norm", "silu_and_mul"})
    assert cfg.verify_report == str(tmp_path / "reports")
    assert load_config({"VLLM_FL_PLATFORM": "cpu", "VLLM_FL_VERIFY": "on"}).verify is True
    file = tmp_path / "f"
    file.write_text("")
    with pytest.raises(ConfigError, match="is a file; expected a directory path"):
        load_config({"VLLM_FL_PLATFORM": "cpu", "VLLM_FL_VERIFY_REPORT": str(file)})

"""The pure parts of bring-up mode: comparing results, merging reports, bisecting ops."""

from __future__ import annotations

import json
import math

import pytest
import torch

from vllm_fl.dispatch import ConfigError, load_config
from vllm_fl.verify.bisect import find_culprits, first_divergence
from vllm_fl.verify.compare import compare
from vllm_fl.verify.record import CallKey, Recorder
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
        act = CallKey("silu_and_mul", "vendor.x", "model.layers.0.mlp.act_fn", "x=4x8", "float32")
        rec.add(act, Diff(err, err, err), 1, 1)
        norm = CallKey("rms_norm", "vendor.x", "model.norm", "x=4x8", "float32")
        rec.add(norm, Diff(math.inf, math.inf, math.inf, ["shape"]), 1, 1)
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


BF16_UNIT = 2.0**-8


def test_cancellation_in_the_reference_is_not_blamed_on_a_more_exact_kernel():
    # the truth has a small element that the reference in bfloat16 loses to cancellation; the
    # kernel, which keeps it, differs from that reference by far more than the parity tolerance
    wide = torch.tensor([[1.0, 1e-3]])
    in_dtype = torch.tensor([[1.0, 0.0]])
    kernel = torch.tensor([[1.0, 1e-3 + 2.0**-14]])
    parity_only = compare(kernel, in_dtype, atol=1e-5, rtol=1e-2)
    assert parity_only.exceeded
    d = compare(kernel, in_dtype, atol=1e-5, rtol=1e-2, wide=wide, unit=BF16_UNIT)
    assert not d.exceeded and d.ratio < 0.1
    assert math.isclose(d.max_abs, 2.0**-14, rel_tol=1e-3)


def test_a_wrong_kernel_fails_both_rules():
    wide = torch.tensor([[1.0, -2.0, 0.5]])
    d = compare(wide + 0.05, wide.clone(), atol=0.01, rtol=0.016, wide=wide, unit=BF16_UNIT)
    assert d.exceeded
    # the rounding rule allows 4 units of rounding at the row's scale (2): 4 * 2^-8 * 2
    assert math.isclose(
        d.ratio, min(0.05 / (0.01 + 0.016 * 0.5), 0.05 / (4 * BF16_UNIT * 2)), rel_tol=1e-5
    )


def test_the_parity_tolerance_still_admits_a_coarser_arithmetic():
    # float32 call, truth in float64: a TF32-like error of 1e-4 is far above float32's rounding
    # but inside a parity tolerance of 1e-3
    wide = torch.tensor([[0.3, 0.7]], dtype=torch.float64)
    ref = wide.to(torch.float32)
    d = compare(ref + 1e-4, ref, atol=1e-3, rtol=1e-3, wide=wide, unit=2.0**-24)
    assert not d.exceeded


def test_each_row_is_judged_at_its_own_scale():
    # a token whose values are small is wrong by 10%: hidden at the scale of the whole tensor,
    # not at its own
    wide = torch.tensor([[100.0, 50.0], [0.01, 0.02]])
    wrong = wide.clone()
    wrong[1] *= 1.1
    d = compare(wrong, wide.clone(), atol=0.01, rtol=0.016, wide=wide, unit=BF16_UNIT)
    assert not d.exceeded  # inside the parity tolerance's atol...
    d = compare(wrong, wide.clone(), atol=0.0, rtol=0.016, wide=wide, unit=BF16_UNIT)
    assert d.exceeded  # ...and caught by both rules once atol does not cover it
    assert d.ratio > 1.0


def test_numbers_on_several_devices_of_one_call_are_read_back_apart(monkeypatch):
    from vllm_fl.verify import compare as c

    class Elsewhere(torch.Tensor):
        """A CPU tensor that says it lives on another device."""

        @property
        def device(self):
            return torch.device("meta")

    e = torch.tensor([[1.0, 2.0]])
    m = c.measure(e + 1.0, e, None, 0.1, 0.0, 0.0)
    m.flags.append((torch.tensor(True).as_subclass(Elsewhere), "wrote into 'x'"))
    m.flags.append((torch.tensor(False), "wrote into 'y'"))
    (d,) = c.resolve([m])
    assert d.exceeded and math.isclose(d.ratio, 10.0) and d.notes == ["wrote into 'x'"]


def test_a_failed_read_back_counts_the_calls_as_not_verified(monkeypatch):
    from vllm_fl.verify import record
    from vllm_fl.verify.compare import measure

    def broken(measures):
        raise RuntimeError("device lost")

    monkeypatch.setattr(record, "resolve", broken)
    rec = Recorder()
    e = torch.zeros(2)
    key = CallKey("silu_and_mul", "vendor.x", "site", "x=2", "float32")
    rec.pend(key, measure(e, e, None, 0.0, 0.0, 0.0), 1, 1)
    (row,) = rec.rows.values()
    assert (row.calls, row.unverified, row.exceeded) == (0, 1, 0)
    assert rec.ops["silu_and_mul"]["verified"] == 0 and rec.ops["silu_and_mul"]["unverified"] == 1
    assert row.notes == ["not verified: RuntimeError: device lost"]

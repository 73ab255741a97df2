"""Bring-up mode's process side (on only where the setting says; torch.compile's traced calls keep
the impl) and the command's output and exit status (with the engine runs stubbed)."""

from __future__ import annotations

import types

import pytest
import torch

import vllm_fl.dispatch as d
from vllm_fl.dispatch import BackendImplKind, OpImpl, OpManager, OpRegistry
from vllm_fl.backends.reference.impl import activation
from vllm_fl.verify import cli, disable, process
from vllm_fl.verify.compare import Diff
from vllm_fl.verify.record import CallKey, Recorder
from vllm_fl.verify.report import merge


@pytest.fixture(autouse=True)
def clean(monkeypatch):
    for var in ("VLLM_FL_VERIFY", "VLLM_FL_VERIFY_REPORT", "VLLM_FL_VERIFY_EVERY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("VLLM_FL_PLATFORM", "cpu")
    d.reset_global_policy()
    yield
    disable()
    monkeypatch.undo()
    d.reset_global_policy()


def biased(self, x):
    return activation.silu_and_mul(self, x) + 0.25


def _manager() -> OpManager:
    registry = OpRegistry()
    registry.register_impl(
        OpImpl(
            "silu_and_mul", "reference.torch", BackendImplKind.REFERENCE, activation.silu_and_mul
        )
    )
    registry.register_impl(
        OpImpl(
            "silu_and_mul",
            "vendor.test",
            BackendImplKind.VENDOR,
            biased,
            vendor="test",
            priority=100,
        )
    )
    return OpManager(registry)


def test_start_does_nothing_while_the_setting_is_off():
    assert process.start(torch.nn.Linear(2, 2)) is False
    assert process.current() is None and process.finish() is None


def test_start_and_finish_write_the_report(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("VLLM_FL_VERIFY", "silu_and_mul")
    monkeypatch.setenv("VLLM_FL_VERIFY_REPORT", str(tmp_path / "reports"))
    d.reset_global_policy()
    manager = _manager()
    model = torch.nn.Sequential(torch.nn.Identity())
    assert process.start(model) is True
    model(torch.zeros(1))  # one engine step
    manager.binding("silu_and_mul").fn(types.SimpleNamespace(), torch.zeros(2, 8))
    text = process.finish()
    assert "silu_and_mul" in text and text in capsys.readouterr().err
    (path,) = (tmp_path / "reports").glob("verify-*.json")
    report = merge([__import__("json").loads(path.read_text())])
    (row,) = report.rows
    assert row.exceeded == 1 and row.first_exceeded["step"] == 1
    assert report.processes[0]["verified"] == ["silu_and_mul"]
    assert process.finish() is None  # once


def test_compiled_model_is_named_and_eager_is_not():
    config = types.SimpleNamespace(
        model_config=types.SimpleNamespace(enforce_eager=False),
        compilation_config=types.SimpleNamespace(mode=types.SimpleNamespace(name="VLLM_COMPILE")),
    )
    assert "VLLM_COMPILE" in process._compiled(config)
    config.model_config.enforce_eager = True
    assert process._compiled(config) == ""


def test_calls_traced_by_torch_compile_run_the_impl_unverified():
    manager = _manager()
    manager.resolve_all()  # as the worker does before anything is compiled
    verifier = process.enable(ops=True)
    fn = manager.binding("silu_and_mul").fn
    layer = types.SimpleNamespace()

    @torch.compile(fullgraph=True, backend="eager")
    def compiled(x):
        return fn(layer, x) * 2

    x = torch.randn(2, 8)
    torch.testing.assert_close(compiled(x), (activation.silu_and_mul(None, x) + 0.25) * 2)
    assert not verifier.recorder.rows
    fn(layer, x)  # eager: verified
    assert len(verifier.recorder.rows) == 1


def _report(exceeded: bool):
    rec = Recorder()
    rec.seen("rms_norm", "vendor.x")
    diff = Diff(1.0, 1.0, 5.0) if exceeded else Diff()
    rec.add(CallKey("rms_norm", "vendor.x", "model.norm", "x=4x8", "float32", 1e-5), diff, 1, 1)
    return merge([rec.to_json(pid=1)])


@pytest.mark.parametrize("exceeded, status", [(True, 1), (False, 0)])
def test_verify_command_prints_the_report_and_fails_on_a_call_over_tolerance(
    monkeypatch, capsys, tmp_path, exceeded, status
):
    seen = {}

    def fake_run(model, **options):
        seen.update(model=model, **options)
        return cli.VerifyRun(_report(exceeded), [[1, 2]], [[1, 2]], 2.0, 1.0, 10, "")

    monkeypatch.setattr(cli, "run_verify", fake_run)
    out = tmp_path / "r.json"
    assert (
        cli.main(["MODEL", "--max-tokens", "3", "--prompts", "a", "b", "--json", str(out)])
        == status
    )
    printed = capsys.readouterr().out
    assert "rms_norm" in printed
    assert "verification cost: 100.0 ms per engine step (10 steps" in printed
    assert "tokens with verification paused: equal" in printed
    assert seen["model"] == "MODEL" and seen["prompts"] == ["a", "b"] and seen["max_tokens"] == 3
    assert '"tokens"' in out.read_text()


def test_bisect_command_prints_the_culprits(monkeypatch, capsys):
    result = {
        "used_impls": {"silu_and_mul": "vendor.x", "rms_norm": "vendor.x"},
        "candidates": ["rms_norm", "silu_and_mul"],
        "divergence": [0, 3],
        "culprits": [["silu_and_mul"], ["rms_norm"]],
        "culprit_divergence": {"silu_and_mul": [1, 4], "rms_norm": [2, 9]},
        "verdicts": {
            "silu_and_mul": {"verified": 10, "over_tolerance": 7},
            "rms_norm": {"verified": 20, "over_tolerance": 0},
        },
        "generations": 4,
    }
    monkeypatch.setattr(cli, "run_bisect", lambda model, **options: result)
    assert cli.main(["bisect", "MODEL"]) == 0
    out = capsys.readouterr().out
    assert "diverge from the all-reference run at prompt 0, token 3" in out
    assert (
        "culprit: silu_and_mul (vendor.x) (alone: prompt 1, token 4): 7 of 10 calls over "
        "tolerance" in out
    )
    assert "culprit: rms_norm (vendor.x) (alone: prompt 2, token 9): all 20 calls within" in out


def test_bad_arguments_are_clear(capsys):
    assert cli.main(["MODEL", "--max-tokens", "0"]) == 2
    assert "--max-tokens=0: expected 1 or more" in capsys.readouterr().err
    assert cli.main(["llama2", "--shape"]) == 2
    assert "--shape: unknown model shape 'llama2'; allowed: llama3-8b, qwen3-moe" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    "given, sent",
    [(None, "on"), (" Off ", "on"), ("0", "on"), ("all", "all"), ("RMS_norm", "RMS_norm")],
)
def test_verify_run_turns_bring_up_mode_on_unless_the_setting_names_ops(
    monkeypatch, tmp_path, given, sent
):
    """``VLLM_FL_VERIFY`` is read through the settings table: unset or off means on for the
    run, on or a list of ops stays as written, an invalid value fails before vLLM starts."""
    seen = {}

    def fake_launch(model, workload, env, timeout):
        seen.update(env)
        result = {"tokens": [], "tokens_unverified": [], "verified_s": 0, "unverified_s": 0}
        return types.SimpleNamespace(result={**result, "steps": 0}, output="")

    monkeypatch.setattr(cli, "_launch", fake_launch)
    env = {"VLLM_FL_VERIFY_REPORT": str(tmp_path)}
    cli.run_verify("MODEL", env if given is None else {**env, "VLLM_FL_VERIFY": given})
    assert seen["VLLM_FL_VERIFY"] == sent
    seen.clear()
    with pytest.raises(d.ConfigError, match="VLLM_FL_VERIFY: invalid op name 'rms norm'"):
        cli.run_verify("MODEL", {**env, "VLLM_FL_VERIFY": "rms norm"})
    assert not seen

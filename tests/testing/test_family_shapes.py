"""The model families' full-size configs: the real models' sizes, cut to a few layers that keep
every kind of layer, readable by transformers (config objects only: no weights are made)."""

from __future__ import annotations

import json

import pytest

from vllm_fl.testing.families import DEFAULT_LAYERS, FAMILIES, GROUPS

#: family -> (hidden size, attention heads, key/value heads, vocabulary) of its real model, as
#: published in its config.json
REAL_SIZES = {
    "llama": (4096, 32, 8, 128256),
    "qwen2": (3584, 28, 4, 152064),
    "qwen3": (4096, 32, 8, 151936),
    "mistral": (4096, 32, 8, 32768),
    "gemma2": (3584, 16, 8, 256000),
    "gemma3": (2560, 8, 4, 262208),
    "phi3": (3072, 32, 32, 32064),
    "gpt2": (768, 12, 12, 50257),
    "opt": (2048, 32, 32, 50272),
    "gpt_neox": (2048, 16, 16, 50304),
    "falcon": (4544, 71, 1, 65024),
    "qwen3_moe": (2048, 32, 4, 151936),
    "mixtral": (4096, 32, 8, 32000),
    "deepseek_v2": (2048, 16, 16, 102400),
    "deepseek_v3": (7168, 128, 128, 129280),
    "gpt_oss": (2880, 64, 8, 201088),
    "qwen3_next": (2048, 16, 2, 151936),
    "mamba2": (2560, None, None, 50288),
    "falcon_h1": (3072, 12, 2, 130049),
    "nemotron_h": (4096, 32, 8, 131072),
    "bert": (768, 12, 12, 30522),
    "qwen3_embedding": (1024, 16, 8, 151669),
}
#: family -> (experts, active experts, expert width)
REAL_EXPERTS = {
    "qwen3_moe": (128, 8, 768),
    "mixtral": (8, 2, 14336),
    "deepseek_v2": (64, 6, 1408),
    "deepseek_v3": (256, 8, 2048),
    "gpt_oss": (32, 4, 2880),
    "qwen3_next": (512, 10, 512),
}


def _transformers_config(family_name: str, layers: int = DEFAULT_LAYERS):
    from transformers import AutoConfig

    family = FAMILIES[family_name]
    return AutoConfig.for_model(**family.checkpoint_config(layers))


def test_every_family_has_its_real_models_sizes():
    assert set(REAL_SIZES) == set(FAMILIES)
    for name, (hidden, heads, kv_heads, vocab) in REAL_SIZES.items():
        config = _transformers_config(name)
        assert config.hidden_size == hidden, name
        assert config.vocab_size == vocab, name
        if heads is not None:
            assert config.num_attention_heads == heads, name
            # Falcon-7B's multi-query attention: one key/value head; GPT-2, OPT, GPT-NeoX and
            # BERT: one per query head
            kv = getattr(config, "num_key_value_heads", config.num_attention_heads)
            kv = 1 if getattr(config, "multi_query", False) else kv
            assert kv == kv_heads, name


def test_moe_families_keep_their_experts():
    for name, (experts, top_k, width) in REAL_EXPERTS.items():
        config = FAMILIES[name].checkpoint_config()
        found = config.get("num_experts") or config.get("n_routed_experts")
        found = found or config.get("num_local_experts")
        assert (found, config["num_experts_per_tok"]) == (experts, top_k), name
        assert config.get("moe_intermediate_size", config["intermediate_size"]) == width, name


def test_rope_scaling_is_the_real_models():
    llama = _transformers_config("llama")
    assert llama.rope_parameters["rope_type"] == "llama3"
    assert llama.rope_parameters["factor"] == 8.0
    deepseek = _transformers_config("deepseek_v3")
    assert deepseek.rope_parameters["rope_type"] == "yarn"
    assert deepseek.rope_parameters["factor"] == 40


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_only_the_layers_are_cut(name):
    family = FAMILIES[name]
    cut = family.checkpoint_config(DEFAULT_LAYERS)
    layers = max(DEFAULT_LAYERS, family.min_layers)
    assert _transformers_config(name).num_hidden_layers == layers
    changed = {key for key in cut if cut[key] != family.config.get(key)}
    allowed = {"num_hidden_layers", *family.cut(layers)}
    assert changed <= allowed, changed - allowed


def test_a_cut_keeps_every_kind_of_layer():
    gemma3 = _transformers_config("gemma3")
    assert set(gemma3.layer_types) == {"sliding_attention", "full_attention"}
    gemma2 = _transformers_config("gemma2")
    assert set(gemma2.layer_types) == {"sliding_attention", "full_attention"}
    gpt_oss = _transformers_config("gpt_oss")
    assert set(gpt_oss.layer_types) == {"sliding_attention", "full_attention"}
    qwen3_next = _transformers_config("qwen3_next")
    assert set(qwen3_next.layer_types) == {"linear_attention", "full_attention"}
    nemotron = _transformers_config("nemotron_h", layers=2)  # raised to its three kinds
    assert sorted(nemotron.hybrid_override_pattern) == sorted("M-*")
    for name in ("deepseek_v2", "deepseek_v3"):
        config = FAMILIES[name].checkpoint_config()
        # one dense layer, the others MoE
        assert config["first_k_dense_replace"] == 1
        assert config["num_hidden_layers"] == 2


def test_a_checkpoint_is_its_config_only(tmp_path):
    folder = FAMILIES["mixtral"].write_checkpoint(tmp_path / "mixtral", layers=3)
    assert [p.name for p in folder.iterdir()] == ["config.json"]
    written = json.loads((folder / "config.json").read_text())
    assert written == FAMILIES["mixtral"].checkpoint_config(3)
    assert written["num_hidden_layers"] == 3


def test_every_family_is_in_one_group():
    members = [name for group in GROUPS.values() for name in group]
    assert sorted(members) == sorted(FAMILIES)

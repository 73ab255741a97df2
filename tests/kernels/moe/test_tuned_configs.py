"""The kernel library's tuned fused-MoE configs (``tuned_configs``): the tables it ships, what
a table may hold, the config a call takes, and that a tuned config comes before FlagGems' own."""

from __future__ import annotations

import json
import logging
import types

import pytest
import torch

from vllm_fl.kernels import launch
from vllm_fl.kernels.moe import experts, tuned_configs

H100 = "NVIDIA_H100_80GB_HBM3"
CONFIG = {
    "BLOCK_SIZE_M": 16,
    "BLOCK_SIZE_N": 64,
    "BLOCK_SIZE_K": 128,
    "GROUP_SIZE_M": 1,
    "num_warps": 4,
    "num_stages": 3,
}


@pytest.fixture
def table_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(tuned_configs, "TABLE_DIR", tmp_path)
    tuned_configs.load_table.cache_clear()
    yield tmp_path
    tuned_configs.load_table.cache_clear()


def _write(folder, table, experts_=8, inter=32, device="GPU_X", dtype=torch.bfloat16):
    path = folder / tuned_configs.table_name(experts_, inter, device, dtype)
    path.write_text(json.dumps(table))
    return path


def test_every_shipped_table_parses_and_is_named_by_its_shape_device_and_dtype():
    tables = sorted(tuned_configs.TABLE_DIR.glob("*.json"))
    assert tables, "the library ships no tuned table"
    for path in tables:
        fields = dict(part.split("=", 1) for part in path.stem.split(","))
        assert sorted(fields) == ["E", "N", "device_name", "dtype"], path.name
        dtype = getattr(torch, fields["dtype"])
        name = tuned_configs.table_name(
            int(fields["E"]), int(fields["N"]), fields["device_name"], dtype
        )
        assert name == path.name
        assert tuned_configs.parse_table(path, path.read_text())


def test_the_h100_table_for_qwen3_moe_experts_is_found():
    tuned_configs.load_table.cache_clear()
    path = tuned_configs.TABLE_DIR / tuned_configs.table_name(128, 768, H100, torch.bfloat16)
    table = json.loads(path.read_text())
    for tokens in (1, 128, 8192):
        got = tuned_configs.config_for(128, 768, H100, torch.bfloat16, tokens)
        assert got == table[str(tokens)]
    assert tuned_configs.config_for(128, 768, H100, torch.float16, 128) is None
    assert tuned_configs.config_for(64, 768, H100, torch.bfloat16, 128) is None


def test_a_call_takes_the_config_of_the_nearest_tuned_token_count(table_dir):
    small, large = dict(CONFIG), {**CONFIG, "BLOCK_SIZE_M": 64}
    _write(table_dir, {"16": small, "64": large})
    assert tuned_configs.config_for(8, 32, "GPU_X", torch.bfloat16, 1) == small
    assert tuned_configs.config_for(8, 32, "GPU_X", torch.bfloat16, 39) == small
    assert tuned_configs.config_for(8, 32, "GPU_X", torch.bfloat16, 41) == large
    assert tuned_configs.config_for(8, 32, "GPU_X", torch.bfloat16, 40) == small  # a tie
    assert tuned_configs.config_for(8, 32, "GPU_X", torch.bfloat16, 9000) == large
    assert tuned_configs.config_for(8, 32, "GPU_Y", torch.bfloat16, 16) is None


def test_a_returned_config_is_a_copy(table_dir):
    _write(table_dir, {"16": CONFIG})
    tuned_configs.config_for(8, 32, "GPU_X", torch.bfloat16, 16)["BLOCK_SIZE_M"] = 128
    assert tuned_configs.config_for(8, 32, "GPU_X", torch.bfloat16, 16) == CONFIG


def test_tensors_off_a_cuda_device_have_no_tuned_config():
    w1, w2 = torch.empty(128, 1536, 8), torch.empty(128, 8, 768)
    assert tuned_configs.lookup(w1, w2, torch.bfloat16, 128) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"16": ', "not JSON"),
        ("[]", "expected an object of token count -> config"),
        ("{}", "expected an object of token count -> config"),
        (json.dumps({"sixteen": CONFIG}), "key 'sixteen' is not a token count"),
        (json.dumps({"0": CONFIG}), "key '0' is not a token count"),
        (json.dumps({"\u00b2": CONFIG}, ensure_ascii=False), "is not a token count"),
        (json.dumps({"16": [16, 64]}), "[16] has list; a config has exactly"),
        (json.dumps({"16": {**CONFIG, "SPLIT_K": 2}}), "[16] has ['BLOCK_SIZE_K',"),
        (json.dumps({"16": {k: v for k, v in CONFIG.items() if k != "num_stages"}}), "exactly"),
        (
            json.dumps({"16": {**CONFIG, "num_stages": "3"}}),
            "[16].num_stages = '3'; must be a positive integer",
        ),
        (json.dumps({"16": {**CONFIG, "num_warps": True}}), "[16].num_warps = True"),
        (json.dumps({"16": {**CONFIG, "GROUP_SIZE_M": 0}}), "[16].GROUP_SIZE_M = 0"),
        (
            json.dumps({"16": {**CONFIG, "BLOCK_SIZE_N": 96}}),
            "[16].BLOCK_SIZE_N = 96; must be a power of two",
        ),
    ],
)
def test_a_malformed_table_is_refused_naming_the_file_key_and_value(tmp_path, text, message):
    path = tmp_path / "table.json"
    with pytest.raises(tuned_configs.TableError) as raised:
        tuned_configs.parse_table(path, text)
    assert str(raised.value).startswith(str(path))
    assert message in str(raised.value)


def test_a_malformed_table_is_not_used_and_is_reported_once(table_dir, caplog):
    path = _write(table_dir, {"16": {**CONFIG, "BLOCK_SIZE_M": 24}})
    with caplog.at_level(logging.WARNING, logger=tuned_configs.__name__):
        for _ in range(3):
            assert tuned_configs.config_for(8, 32, "GPU_X", torch.bfloat16, 16) is None
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 1
    assert str(path) in warnings[0] and "BLOCK_SIZE_M = 24" in warnings[0]


def _fake_gems_module(picked: list):
    triton = pytest.importorskip("triton")

    @triton.jit
    def fused_moe_kernel(a_ptr, b_ptr):
        pass

    def try_get_optimal_moe_config(w1_shape, w2_shape, top_k, dtype, m, E):
        picked.append((tuple(w1_shape), tuple(w2_shape), top_k, dtype, m, E))
        return {**CONFIG, "BLOCK_SIZE_M": 32}

    return types.SimpleNamespace(
        fused_moe_kernel=fused_moe_kernel,
        try_get_optimal_moe_config=try_get_optimal_moe_config,
        _get_config_dtype_str=lambda dtype: None,
    )


def test_the_tuned_config_comes_before_flag_gems_own(monkeypatch):
    picked: list = []
    monkeypatch.setattr(launch, "defining_module", lambda public: _fake_gems_module(picked))
    tuned = {**CONFIG, "BLOCK_SIZE_M": 64}
    monkeypatch.setattr(
        tuned_configs, "lookup", lambda w1, w2, dtype, m: dict(tuned) if m > 4 else None
    )
    kernels = experts.flag_gems_kernels.__wrapped__()
    w1, w2 = torch.empty(8, 64, 16), torch.empty(8, 16, 32)
    config, key = kernels.config(w1, w2, 2, torch.bfloat16, 128)
    assert config == tuned and key == tuple(sorted(tuned.items()))
    assert picked == []
    config, _ = kernels.config(w1, w2, 2, torch.bfloat16, 4)
    assert config["BLOCK_SIZE_M"] == 32
    assert picked == [((8, 64, 16), (8, 16, 32), 2, None, 4, 8)]
    kernels.config(w1, w2, 2, torch.bfloat16, 4)
    assert len(picked) == 1  # looked up once per call shape


def test_an_unreadable_table_is_not_used_and_is_reported(table_dir, caplog):
    path = table_dir / tuned_configs.table_name(8, 32, "GPU_X", torch.bfloat16)
    path.write_bytes(b"\xff\xfe{")
    with caplog.at_level(logging.WARNING, logger=tuned_configs.__name__):
        assert tuned_configs.config_for(8, 32, "GPU_X", torch.bfloat16, 16) is None
    assert [str(path) in record.getMessage() for record in caplog.records] == [True]

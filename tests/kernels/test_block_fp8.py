"""The block-FP8 GEMM's tuned tables: names, lookup, the tuner's search space and its tables."""

from __future__ import annotations

import argparse
import json

import pytest

from vllm_fl.kernels import block_fp8, block_fp8_tune, tuned

CONFIG = {
    "BLOCK_SIZE_M": 16,
    "BLOCK_SIZE_N": 64,
    "BLOCK_SIZE_K": 128,
    "GROUP_SIZE_M": 1,
    "num_warps": 4,
    "num_stages": 4,
}


@pytest.fixture
def table_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(block_fp8, "TABLE_DIR", tmp_path)
    block_fp8.load_table.cache_clear()
    yield tmp_path
    block_fp8.load_table.cache_clear()


def test_the_nearest_tuned_token_count_gives_the_config(table_dir):
    big = {**CONFIG, "BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 256}
    name = block_fp8.table_name(4096, 14336, "GPU_X", (128, 128))
    assert name == "N=4096,K=14336,device_name=GPU_X,dtype=fp8_w8a8,block=128x128.json"
    (table_dir / name).write_text(json.dumps({"1": CONFIG, "4096": big}))
    assert block_fp8.config_for(4096, 14336, "GPU_X", (128, 128), 2) == CONFIG
    assert block_fp8.config_for(4096, 14336, "GPU_X", (128, 128), 3000) == big
    assert block_fp8.config_for(4096, 4096, "GPU_X", (128, 128), 2) is None
    assert block_fp8.config_for(4096, 14336, "GPU_Y", (128, 128), 2) is None


def test_a_broken_table_is_not_used_and_is_reported(table_dir, caplog):
    name = block_fp8.table_name(64, 128, "GPU_X", (128, 128))
    (table_dir / name).write_text(json.dumps({"1": {**CONFIG, "num_warps": 3}}))
    assert block_fp8.config_for(64, 128, "GPU_X", (128, 128), 1) is None
    assert "num_warps = 3; must be a power of two" in caplog.text
    assert name in caplog.text


def test_the_search_space_fits_the_token_count():
    for tokens, rows in ((1, {16}), (16, {16}), (64, {16, 32, 64}), (4096, {64, 128})):
        space = block_fp8_tune.search_space(tokens)
        assert {c["BLOCK_SIZE_M"] for c in space} == rows
        assert all(list(c) == list(tuned.CONFIG_KEYS) for c in space)
        assert len({tuple(c.values()) for c in space}) == len(space)
    # one tile of rows: no grouping of tiles
    assert {c["GROUP_SIZE_M"] for c in block_fp8_tune.search_space(1)} == {1}
    assert {c["GROUP_SIZE_M"] for c in block_fp8_tune.search_space(4096)} == {1, 8}


def test_gemm_shapes_are_parsed_and_bad_ones_refused():
    assert block_fp8_tune.parse_gemm("6144x4096") == (6144, 4096)
    for bad in ("6144", "0x4096", "6144x100", "axb"):
        with pytest.raises(argparse.ArgumentTypeError, match=repr(bad)):
            block_fp8_tune.parse_gemm(bad)


def test_the_tuner_writes_tables_the_library_loads(table_dir):
    result = {
        "device": "GPU X",
        "block": [128, 128],
        "rows": [
            {"n": 256, "k": 512, "tokens": 1, "best": CONFIG},
            {"n": 256, "k": 512, "tokens": 64, "best": {**CONFIG, "BLOCK_SIZE_M": 64}},
            {"n": 512, "k": 256, "tokens": 1, "best": CONFIG},
        ],
    }
    paths = block_fp8_tune.write_tables(result)
    assert [p.name for p in paths] == [
        block_fp8.table_name(256, 512, "GPU_X", (128, 128)),
        block_fp8.table_name(512, 256, "GPU_X", (128, 128)),
    ]
    assert block_fp8.config_for(256, 512, "GPU_X", (128, 128), 50)["BLOCK_SIZE_M"] == 64
    assert block_fp8.config_for(512, 256, "GPU_X", (128, 128), 50) == CONFIG


def test_the_shipped_tables_parse_and_are_named_for_their_contents():
    tables = sorted(block_fp8.TABLE_DIR.glob("*.json"))
    assert tables, "the library ships no tuned block-FP8 table"
    for path in tables:
        table = tuned.parse_table(path, path.read_text())
        fields = dict(part.split("=", 1) for part in path.stem.split(","))
        assert fields["dtype"] == "fp8_w8a8" and fields["block"] == "128x128", path.name
        # every config keeps a tile inside one 128-column scale group
        assert all(config["BLOCK_SIZE_K"] <= 128 for config in table.values()), path.name


def test_group_scales_are_laid_out_as_the_block_gemms_read_them():
    import torch

    scales = torch.arange(10.0).reshape(5, 2)
    assert block_fp8.scales_in_layout(scales, False, False) is scales
    column = block_fp8.scales_in_layout(scales, True, False)
    assert column.stride() == (1, 5) and torch.equal(column, scales)
    aligned = block_fp8.scales_in_layout(scales, True, True)
    assert aligned.stride() == (1, 8) and torch.equal(aligned, scales)
    # already in the layout: no copy
    assert block_fp8.scales_in_layout(column, True, False) is column
    assert block_fp8.scales_in_layout(aligned, True, True) is aligned

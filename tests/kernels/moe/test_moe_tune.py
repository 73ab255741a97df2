"""The tuner's parts that need no GPU (``vllm_fl.kernels.moe.tune``): the search space, the
choice of the fastest config, the table it writes (which the library must load as written), the
shape its arguments give, and its refusal without a GPU."""

from __future__ import annotations

import argparse
import itertools

import pytest
import torch

from vllm_fl.kernels.moe import tune, tuned_configs


def test_the_search_space_is_every_combination_whose_stages_fit_in_shared_memory():
    space = tune.search_space()
    ids = [tune.config_id(config) for config in space]
    assert len(set(ids)) == len(ids)
    every = [dict(zip(tune.SPACE, values)) for values in itertools.product(*tune.SPACE.values())]

    def fits(config, limit):
        tiles = config["BLOCK_SIZE_K"] * (config["BLOCK_SIZE_M"] + config["BLOCK_SIZE_N"])
        return tiles * 2 * config["num_stages"] <= limit

    assert space == [c for c in every if fits(c, tune.SHARED_MEMORY)]
    assert 0 < len(space) < len(every)  # the largest 4-stage tiles do not fit
    smaller = tune.search_space(shared_memory=64 * 1024)
    assert smaller == [c for c in every if fits(c, 64 * 1024)] and len(smaller) < len(space)


def test_every_config_of_the_space_is_one_a_table_may_hold(tmp_path):
    table = {16 * (i + 1): config for i, config in enumerate(tune.search_space())}
    parsed = tuned_configs.parse_table(tmp_path / "t.json", tune.table_json(table))
    assert parsed == table


def test_the_fastest_config_is_the_lowest_median_not_the_lowest_sample():
    timings = {("lucky",): [1.0, 10.0, 10.0], ("steady",): [5.0, 5.0, 6.0]}
    assert tune.fastest(timings) == ("steady",)
    assert tune.fastest({("a",): [2.0], ("b",): [2.0]}) == ("a",)


def test_a_table_lists_token_counts_in_numeric_order_with_keys_in_config_order():
    config = {key: 1 for key in reversed(tuned_configs.CONFIG_KEYS)}
    text = tune.table_json({1024: config, 128: config, 16: config})
    positions = [text.index(f'"{count}"') for count in (16, 128, 1024)]
    assert positions == sorted(positions)
    first = text.index('"16"')
    keys = [text.index(f'"{key}"', first) for key in tuned_configs.CONFIG_KEYS]
    assert keys == sorted(keys)


def _result(best):
    return {
        "device": "GPU X 80GB",
        "experts": 8,
        "intermediate": 32,
        "dtype": "bfloat16",
        "rows": [{"tokens": 64, "best": best}, {"tokens": 1, "best": best}],
    }


def test_the_written_table_is_the_one_the_library_loads(tmp_path, monkeypatch):
    monkeypatch.setattr(tuned_configs, "TABLE_DIR", tmp_path / "tuned")
    tuned_configs.load_table.cache_clear()
    best = tune.search_space()[0]
    path = tune.write_table(_result(best))
    assert path.name == "E=8,N=32,device_name=GPU_X_80GB,dtype=bfloat16.json"
    try:
        assert tuned_configs.config_for(8, 32, "GPU_X_80GB", torch.bfloat16, 60) == best
    finally:
        tuned_configs.load_table.cache_clear()


def test_a_table_the_library_would_refuse_is_not_written(tmp_path, monkeypatch):
    monkeypatch.setattr(tuned_configs, "TABLE_DIR", tmp_path)
    bad = {**tune.search_space()[0], "BLOCK_SIZE_N": 48}
    with pytest.raises(tuned_configs.TableError, match="BLOCK_SIZE_N = 48"):
        tune.write_table(_result(bad))
    assert list(tmp_path.iterdir()) == []


SIZES = ["--experts", "8", "--intermediate", "32", "--hidden", "16", "--top-k", "2"]


def test_without_a_gpu_it_says_so(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert tune.main(SIZES) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_a_shape_is_all_four_positive_sizes_with_no_more_experts_per_token_than_experts(capsys):
    parser_errors = {
        ("--experts", "8", "--hidden", "4096"): "missing --intermediate, --top-k",
        ("--experts", "8", "--intermediate", "1", "--hidden", "1", "--top-k", "0"): "--top-k 0",
        ("--experts", "8", "--intermediate", "1", "--hidden", "1", "--top-k", "9"): "more than",
    }
    for argv, message in parser_errors.items():
        with pytest.raises(SystemExit):
            tune.main(list(argv))
        assert message in capsys.readouterr().err


def test_the_shape_the_arguments_give():
    parser = argparse.ArgumentParser()
    args = argparse.Namespace(label="mixtral", experts=8, intermediate=14336, hidden=4096, top_k=2)
    assert tune.expert_shape(parser, args) == tune.ExpertShape("mixtral", 8, 14336, 4096, 2)


def test_token_counts_are_positive_integers():
    assert tune.int_list("1,64,2048") == [1, 64, 2048]
    for bad in ("1,0", "1,x", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="not a positive integer"):
            tune.int_list(bad)


def test_a_result_file_is_written_with_its_folders(tmp_path):
    path = tmp_path / "a" / "b.json"
    tune.write_json(path, {"rows": [1]})
    assert path.read_text() == '{\n "rows": [\n  1\n ]\n}\n'

"""tune_moe.py's parts that need no GPU: the search space, the choice of the fastest config, the
table it writes (which the backend must load as written), and its refusal without a GPU."""

from __future__ import annotations

import itertools

import pytest
import torch
from benchmarks import tune_moe

from vllm_fl.dispatch.backends.flaggems import tuned_configs


def test_the_search_space_is_every_combination_whose_stages_fit_in_shared_memory():
    space = tune_moe.search_space()
    ids = [tune_moe.config_id(config) for config in space]
    assert len(set(ids)) == len(ids)
    every = [
        dict(zip(tune_moe.SPACE, values)) for values in itertools.product(*tune_moe.SPACE.values())
    ]

    def fits(config, limit):
        tiles = config["BLOCK_SIZE_K"] * (config["BLOCK_SIZE_M"] + config["BLOCK_SIZE_N"])
        return tiles * 2 * config["num_stages"] <= limit

    assert space == [c for c in every if fits(c, tune_moe.SHARED_MEMORY)]
    assert 0 < len(space) < len(every)  # the largest 4-stage tiles do not fit
    smaller = tune_moe.search_space(shared_memory=64 * 1024)
    assert smaller == [c for c in every if fits(c, 64 * 1024)] and len(smaller) < len(space)


def test_every_config_of_the_space_is_one_a_table_may_hold(tmp_path):
    table = {16 * (i + 1): config for i, config in enumerate(tune_moe.search_space())}
    parsed = tuned_configs.parse_table(tmp_path / "t.json", tune_moe.table_json(table))
    assert parsed == table


def test_the_fastest_config_is_the_lowest_median_not_the_lowest_sample():
    timings = {("lucky",): [1.0, 10.0, 10.0], ("steady",): [5.0, 5.0, 6.0]}
    assert tune_moe.fastest(timings) == ("steady",)
    assert tune_moe.fastest({("a",): [2.0], ("b",): [2.0]}) == ("a",)


def test_a_table_lists_token_counts_in_numeric_order_with_keys_in_config_order():
    config = {key: 1 for key in reversed(tuned_configs.CONFIG_KEYS)}
    text = tune_moe.table_json({1024: config, 128: config, 16: config})
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


def test_the_written_table_is_the_one_the_backend_loads(tmp_path, monkeypatch):
    monkeypatch.setattr(tuned_configs, "TABLE_DIR", tmp_path / "tuned")
    tuned_configs.load_table.cache_clear()
    best = tune_moe.search_space()[0]
    path = tune_moe.write_table(_result(best))
    assert path.name == "E=8,N=32,device_name=GPU_X_80GB,dtype=bfloat16.json"
    try:
        assert tuned_configs.config_for(8, 32, "GPU_X_80GB", torch.bfloat16, 60) == best
    finally:
        tuned_configs.load_table.cache_clear()


def test_a_table_the_backend_would_refuse_is_not_written(tmp_path, monkeypatch):
    monkeypatch.setattr(tuned_configs, "TABLE_DIR", tmp_path)
    bad = {**tune_moe.search_space()[0], "BLOCK_SIZE_N": 48}
    with pytest.raises(tuned_configs.TableError, match="BLOCK_SIZE_N = 48"):
        tune_moe.write_table(_result(bad))
    assert list(tmp_path.iterdir()) == []


def test_without_a_gpu_it_says_so(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert tune_moe.main([]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_unknown_shapes_are_refused(capsys):
    with pytest.raises(SystemExit):
        tune_moe.main(["--shape", "llama3-8b"])
    assert "invalid choice: 'llama3-8b'" in capsys.readouterr().err


def test_a_shape_is_a_model_of_shapes_py_or_all_four_sizes(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    parser_errors = {
        ("--experts", "8", "--hidden", "4096"): "missing --intermediate, --top-k",
        ("--experts", "8", "--intermediate", "1", "--hidden", "1", "--top-k", "0"): "--top-k 0",
        ("--experts", "8", "--intermediate", "1", "--hidden", "1", "--top-k", "9"): "more than",
    }
    for argv, message in parser_errors.items():
        with pytest.raises(SystemExit):
            tune_moe.main(list(argv))
        assert message in capsys.readouterr().err


def test_the_shape_the_arguments_name():
    parser = tune_moe.argparse.ArgumentParser()
    sizes = {"experts": None, "intermediate": None, "hidden": None, "top_k": None}
    args = tune_moe.argparse.Namespace(shape="qwen3-moe", **sizes)
    assert tune_moe.expert_shape(parser, args) == tune_moe.ExpertShape(
        "qwen3-moe", 128, 768, 2048, 8
    )
    args = tune_moe.argparse.Namespace(
        shape="qwen3-moe", experts=8, intermediate=14336, hidden=4096, top_k=2
    )
    assert tune_moe.expert_shape(parser, args) == tune_moe.ExpertShape("custom", 8, 14336, 4096, 2)

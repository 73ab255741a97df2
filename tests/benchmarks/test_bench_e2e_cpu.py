"""bench_e2e_cpu keeps the best run of each configuration and compares its tokens with vanilla's."""

from __future__ import annotations

import bench_e2e_cpu
from vllm_harness import PLUGIN_OFF, VllmRun


def fake_runner(speeds: dict[tuple[str, bool], list[float]]):
    """A run_vllm that reports the next speed of (mode, plugin on) and tokens that differ from
    vanilla's for the compiled plugin."""
    calls = []

    def run(model, env, *, mode, max_tokens, num_prompts):
        plugin = env != PLUGIN_OFF
        calls.append((mode, plugin, max_tokens, num_prompts))
        speed = speeds[mode, plugin].pop(0)
        tokens = [[2]] if (mode, plugin) == ("compile", True) else [[1]]
        result = dict(
            platform="P",
            init_s=1.0,
            generate_s=0.5,
            output_tokens=8,
            tokens_per_s=speed,
            tokens=tokens,
            used_impls={"rms_norm": "reference.torch"} if plugin else {},
        )
        return VllmRun(env=env, result=result, output="", wall_s=speed)

    return run, calls


def test_best_run_per_configuration_and_tokens_compared_with_vanilla():
    speeds = {
        ("eager", False): [10.0, 12.0],
        ("eager", True): [9.0, 6.0],
        ("compile", False): [20.0, 18.0],
        ("compile", True): [21.0, 22.0],
    }
    runner, calls = fake_runner(speeds)
    rows = bench_e2e_cpu.measure("model", 4, 8, 2, runner=runner)
    assert len(calls) == 8 and calls[0] == ("eager", False, 8, 4)
    assert [(r["mode"], r["config"], r["tokens_per_s"]) for r in rows] == [
        ("eager", "vLLM", 12.0),
        ("eager", "vLLM + vllm_fl", 9.0),
        ("compile", "vLLM", 20.0),
        ("compile", "vLLM + vllm_fl", 22.0),
    ]
    assert [r["tokens_match_vanilla"] for r in rows] == [True, True, True, False]
    assert rows[0]["wall_s"] == 10.0  # the fastest wall time of the configuration's runs
    table = bench_e2e_cpu.format_table(rows)
    assert "eager: plugin / vanilla tokens/s = 0.75" in table
    assert "compile: plugin / vanilla tokens/s = 1.10" in table

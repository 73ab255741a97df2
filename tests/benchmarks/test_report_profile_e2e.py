"""The renderer of profile_engine and policy-design results: engine steps per configuration,
and the policies compared inside one engine."""

from __future__ import annotations

from benchmarks.report_flagos import profile_e2e

STEPS = {
    "step_ms": 30.0,
    "gpu_kernel_ms_per_step": 12.5,
    "host_ms_per_step_profiled": {"vllm": 20.0, "vllm_fl": 3.0},
}


def test_each_config_is_a_row_with_its_host_time_by_origin():
    text = profile_e2e(
        [
            {"config": "vanilla", **STEPS, "host_ms_per_step_profiled": {"vllm": 22.0}},
            {"config": "prefer=flagos", **STEPS},
        ]
    )
    lines = text.splitlines()
    assert (
        lines[0]
        == "| config | ms per step | GPU kernels ms | host ms (cProfile) | vllm | vllm_fl |"
    )
    assert lines[2] == "| vanilla | 30.00 | 12.50 | 22.00 | 22.00 | – |"
    assert lines[3] == "| prefer=flagos | 30.00 | 12.50 | 23.00 | 20.00 | 3.00 |"


def test_ab_policies_are_compared_with_prefer_vendor():
    result = {
        "config": "plugin",
        "step_ms": {"prefer=vendor": 20.0, "prefer=flagos": 22.0},
        "samples": {"prefer=vendor": [20.0, 21.0], "prefer=flagos": [22.0, 23.5]},
    }
    lines = profile_e2e([result, {"config": "other", "error": "engine died"}]).splitlines()
    assert lines[3] == "| prefer=flagos | 22.00 | 1.100× | – | 22.0, 23.5 |"
    assert lines[-1] == "other: failed (engine died)"


def test_ab_round_paired_ratios_are_shown_with_their_range():
    result = {
        "config": "plugin",
        "step_ms": {"prefer=vendor": 20.0, "prefer=flagos": 22.0},
        "samples": {"prefer=vendor": [20.0, 30.0], "prefer=flagos": [22.0, 31.5]},
        "paired_ratio": {"prefer=vendor": 1.0, "prefer=flagos": 1.075},
        "paired_ratio_range": {"prefer=vendor": [1.0, 1.0], "prefer=flagos": [1.05, 1.1]},
    }
    lines = profile_e2e([result]).splitlines()
    assert lines[3] == "| prefer=flagos | 22.00 | 1.100× | 1.075× (1.050-1.100) | 22.0, 31.5 |"


def test_align_graph_has_a_row_per_pair_count_and_a_column_per_impl():
    from benchmarks.report_flagos import align_graph

    result = {
        "device": "GPU",
        "rows": [
            {"tokens": 16, "pairs": 128, "impl": "one program, 4 warps", "graph_us": 14.47},
            {"tokens": 16, "pairs": 128, "impl": "FlagGems staged", "graph_us": 10.05},
            {"tokens": 1, "pairs": 8, "impl": "FlagGems staged", "graph_us": 9.77},
        ],
    }
    lines = align_graph(result).splitlines()
    assert lines[0] == "GPU: GPU µs per call in CUDA graphs"
    assert lines[2] == "| pairs | one program, 4 warps | FlagGems staged |"
    assert lines[4:] == ["| 8 | – | 9.8 |", "| 128 | 14.5 | 10.1 |"]


def test_moe_tune_has_a_row_per_token_count_with_both_configs_and_the_speed_up():
    from benchmarks.report_flagos import moe_tune

    def config(m, n, k, group, warps, stages):
        keys = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M")
        return {**dict(zip(keys, (m, n, k, group))), "num_warps": warps, "num_stages": stages}

    result = {
        "device": "GPU",
        "shape": "qwen3-moe",
        "experts": 128,
        "intermediate": 768,
        "hidden": 2048,
        "top_k": 8,
        "dtype": "bfloat16",
        "configs": 165,
        "failed": 2,
        "rows": [
            {
                "tokens": 128,
                "flag_gems": config(16, 128, 64, 1, 4, 3),
                "flag_gems_us": 454.0,
                "best": config(16, 64, 128, 1, 4, 4),
                "best_us": 429.34,
            },
            {
                "tokens": 1,
                "flag_gems": config(16, 64, 128, 1, 4, 3),
                "flag_gems_us": 38.0,
                "best": config(16, 64, 128, 1, 4, 3),
                "best_us": 38.0,
            },
        ],
    }
    text = moe_tune(result)
    assert text.startswith("GPU, qwen3-moe experts (128 × 768, hidden 2048, top-8), bfloat16; 165")
    assert "2 failed to compile" in text.replace("\n", " ")
    rows = [line for line in text.splitlines() if line.startswith("| ")][1:]
    assert rows == [
        "| 1 | 16×64×128 g1 w4 s3 | 38.0 | 16×64×128 g1 w4 s3 | 38.0 | 1.000× |",
        "| 128 | 16×128×64 g1 w4 s3 | 454.0 | 16×64×128 g1 w4 s4 | 429.3 | 1.057× |",
    ]

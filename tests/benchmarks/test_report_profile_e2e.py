"""The README renderer of profile_e2e results: engine steps per configuration, and the policies
compared inside one engine."""

from __future__ import annotations

from report_flagos import profile_e2e

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
    from report_flagos import align_graph

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

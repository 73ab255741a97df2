"""The attention decode tuner's choice (without a GPU: rows as the benchmark writes them): the
launch with the least geometric mean over the contexts, failures left out, the rendered table."""

from __future__ import annotations

from benchmarks import tune_attention
from benchmarks.bench_attention import Row
from benchmarks.report import attention_tune


def _rows(times: dict[tuple[int, int, str], float | None]) -> list[Row]:
    return [
        Row("llama3-8b", f"decode-b{seqs}-c{context}", name, us, error=None if us else "boom")
        for (seqs, context, name), us in times.items()
    ]


def test_the_least_geometric_mean_over_contexts_wins():
    rows = _rows(
        {
            # one sequence: 64 segments best at the long context, 16 at the short one; 64 wins
            # by the geometric mean (sqrt(8 x 8) < sqrt(6 x 12))
            (1, 512, "triton-3d-s16"): 6.0,
            (1, 2048, "triton-3d-s16"): 12.0,
            (1, 512, "triton-3d-s64"): 8.0,
            (1, 2048, "triton-3d-s64"): 8.0,
            (1, 512, "triton-2d"): 18.0,
            (1, 2048, "triton-2d"): 66.0,
            # 256 sequences: the 2D kernel; a faster candidate that failed at one context is out
            (256, 512, "triton-2d"): 190.0,
            (256, 2048, "triton-2d"): 720.0,
            (256, 512, "triton-3d-s8"): 100.0,
            (256, 2048, "triton-3d-s8"): None,
        }
    )
    chosen = tune_attention.choose(rows, [1, 256], [512, 2048])
    assert chosen[1]["segments"] == 64 and chosen[1]["best"] == "triton-3d-s64"
    assert chosen[256]["segments"] == 1 and "triton-3d-s8" not in chosen[256]["geomean_us"]


def test_a_batch_without_a_complete_candidate_gets_no_entry():
    rows = _rows({(4, 512, "triton-2d"): 10.0})
    assert tune_attention.choose(rows, [4], [512, 2048]) == {}


def test_the_rendered_table_compares_with_vllms_rule():
    rows = _rows(
        {
            (1, 512, "triton-3d-s16"): 8.0,
            (1, 512, "triton-3d-s32"): 4.0,
        }
    )
    choices = tune_attention.choose(rows, [1], [512])
    result = {
        "device": "GPU",
        "contexts": [512],
        "models": [{"name": "llama3-8b", "kv_heads": 8, "choices": {"1": choices[1]}}],
    }
    text = attention_tune(result)
    assert "contexts 512" in text
    line = next(line for line in text.splitlines() if line.startswith("llama3-8b"))
    # vLLM's rule runs one sequence with 16 segments: 8.0 us against the chosen 4.0
    assert line.split() == ["llama3-8b", "1", "triton-3d-s32", "4.00", "8.00", "2.000"]


def test_an_attention_shape_is_given_as_heads_kv_heads_head_size():
    import argparse

    import pytest

    model = tune_attention.attention_shape("64x8x128")
    assert (model.name, model.heads, model.kv_heads, model.head_size) == ("64x8x128", 64, 8, 128)
    for bad, says in (("64x8", "HEADSxKV_HEADSxHEAD_SIZE"), ("64x7x128", "not a multiple of 7")):
        with pytest.raises(argparse.ArgumentTypeError, match=says):
            tune_attention.attention_shape(bad)

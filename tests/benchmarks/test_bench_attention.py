"""bench_attention: its shapes and candidates, its command line and its table (no GPU needed)."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks import bench_attention as bench
from benchmarks import report, timing
from benchmarks.bench_attention import Row

TINY = bench.Model("tiny", heads=4, kv_heads=2, head_size=8)


def _shape(name: str) -> bench.Shape:
    return next(s for s in bench.SHAPES if s.name == name)


def test_models_are_the_llama3_8b_and_qwen3_30b_a3b_attention_layers():
    shapes = {m.name: (m.heads, m.kv_heads, m.head_size) for m in bench.MODELS}
    assert shapes == {"llama3-8b": (32, 8, 128), "qwen3-30b-a3b": (32, 4, 128)}


def test_decode_shapes_cover_three_batches_at_two_contexts_with_one_query_each():
    decode = [s for s in bench.SHAPES if s.phase == "decode"]
    assert {(s.seqs, s.seq_len) for s in decode} == {
        (1, 512),
        (1, 2048),
        (32, 512),
        (32, 2048),
        (256, 512),
        (256, 2048),
    }
    assert all(s.query_len == 1 for s in decode)
    assert _shape("decode-b32-c2048") == bench.Shape("decode-b32-c2048", "decode", 32, 1, 2048)


def test_prefill_shapes_are_new_tokens_without_context():
    prefill = {
        s.name: (s.seqs, s.query_len, s.seq_len) for s in bench.SHAPES if s.phase == "prefill"
    }
    assert prefill == {
        "prefill-512": (1, 512, 512),
        "prefill-4096": (1, 4096, 4096),
        "prefill-8x512": (8, 512, 512),
    }


def test_candidates_are_named_once_and_run_a_known_kernel():
    names = [c.name for c in bench.CANDIDATES]
    assert len(names) == len(set(names))
    assert {c.kernel for c in bench.CANDIDATES} <= bench.KERNELS.keys()
    assert bench.BASELINE in names


def test_the_triton_launch_variants_are_decode_only_data():
    variants = {c.name: c.kwargs for c in bench.CANDIDATES if c.kernel == "vllm_triton"}
    assert variants == {
        "triton-2d": {"segments": None},
        "triton-3d-s8": {"segments": 8},
        "triton-3d-s16": {"segments": 16},
        "triton-3d-s32": {"segments": 32},
        "triton-3d-s64": {"segments": 64},
    }
    assert all(c.phases == ("decode",) for c in bench.CANDIDATES if c.kernel == "vllm_triton")


def test_flaggems_candidates_name_both_varlen_functions():
    functions = {c.kwargs["function"] for c in bench.CANDIDATES if c.kernel == "flaggems"}
    assert functions == {"flash_attn_varlen_func", "flash_attn_varlen_opt_func"}


def test_inputs_page_every_sequence_through_its_own_random_blocks():
    x = bench.make_inputs(TINY, bench.Shape("s", "decode", 3, 1, 40), device="cpu")
    assert x.query.shape == (3, 4, 8) and x.query.dtype == torch.bfloat16
    assert x.key_cache.shape == x.value_cache.shape == (9, 16, 2, 8)  # 3 blocks of 16 each
    # vLLM 0.24's layout: one tensor, a block's values after its keys
    assert x.value_cache.data_ptr() - x.key_cache.data_ptr() == 16 * 2 * 8 * 2
    assert x.key_cache.stride(0) == 2 * 16 * 2 * 8
    assert x.block_table.shape == (3, 3)
    assert sorted(x.block_table.flatten().tolist()) == list(range(9))
    assert x.block_table.flatten().tolist() != list(range(9))
    assert x.seq_lens.tolist() == [40, 40, 40]
    assert x.query_start_loc.tolist() == [0, 1, 2, 3]
    assert x.scale == 8**-0.5


def test_prefill_inputs_hold_each_sequence_s_new_tokens_as_queries():
    x = bench.make_inputs(TINY, bench.Shape("p", "prefill", 2, 20, 20), device="cpu")
    assert x.query.shape == (40, 4, 8)
    assert x.query_start_loc.tolist() == [0, 20, 40]
    assert x.block_table.shape == (2, 2)


@pytest.fixture
def on_cpu(monkeypatch):
    """measure_one on the CPU: no device to synchronise, a fixed time for what passes."""
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(timing, "kernel_us", lambda fn: timing.KernelTime(1.234, "graph"))
    kernels = {}
    monkeypatch.setattr(bench, "KERNELS", kernels)
    return kernels


def test_only_a_kernel_that_matches_the_reference_is_timed(on_cpu):
    x = bench.make_inputs(TINY, bench.Shape("p", "prefill", 2, 20, 20), device="cpu")
    expected = bench.reference_output(x)

    def writes(delta):
        return lambda x, out: lambda: out.copy_(expected + delta)

    def half(x, out):
        return lambda: out[:20].copy_(expected[:20])

    def raises(x, out):
        raise AssertionError()

    on_cpu.update(close=writes(0.01), far=writes(0.25), half=half, raises=raises)
    rows = {n: bench.measure_one(bench.Candidate(n, n), x, expected) for n in on_cpu}
    assert (rows["close"].us, rows["close"].timing, rows["close"].error) == (1.23, "graph", None)
    assert 0 < rows["close"].max_abs_err < 0.05  # 0.01 and bfloat16's rounding
    assert rows["far"].us is None and rows["far"].max_abs_err > 0.2
    assert rows["far"].error.startswith("wrong result: max abs error 0.2")
    assert rows["far"].error.endswith(" > 0.05")
    assert rows["half"].us is None and rows["half"].error.startswith("wrong result")
    assert rows["raises"].error == "AssertionError"


def test_the_reference_is_causal_attention_over_the_paged_keys():
    x = bench.make_inputs(TINY, bench.Shape("p", "prefill", 1, 20, 20), device="cpu")
    out = bench.reference_output(x)
    # the first query sees only the first key: its output is that key's value, per kv head
    first_block = x.block_table[0, 0]
    values = x.value_cache[first_block, 0].float().repeat_interleave(2, dim=0)
    torch.testing.assert_close(out[0].float(), values, atol=1e-2, rtol=1e-2)


def test_without_filters_everything_is_selected():
    chosen = bench.parse_args([])
    assert chosen.models == list(bench.MODELS)
    assert chosen.shapes == list(bench.SHAPES)
    assert chosen.candidates == list(bench.CANDIDATES)
    assert chosen.json is None


def test_filters_keep_the_named_entries_in_table_order(tmp_path):
    chosen = bench.parse_args(
        [
            "--models",
            "qwen3-30b-a3b",
            "--shapes",
            "prefill-512,decode-b1-c512",
            "--candidates",
            "fa3,flagos",
            "--json",
            str(tmp_path / "out.json"),
        ]
    )
    assert [m.name for m in chosen.models] == ["qwen3-30b-a3b"]
    assert [s.name for s in chosen.shapes] == ["decode-b1-c512", "prefill-512"]
    assert [c.name for c in chosen.candidates] == ["flagos", "fa3"]
    assert chosen.json == tmp_path / "out.json"


@pytest.mark.parametrize(
    "flag, value, allowed",
    [
        ("--candidates", "fa4", "flagos, vllm-triton, triton-2d"),
        ("--shapes", "decode-b2-c512", "decode-b1-c512, decode-b1-c2048"),
        ("--models", "llama2", "llama3-8b, qwen3-30b-a3b"),
    ],
)
def test_unknown_names_are_refused_with_what_is_allowed(flag, value, allowed, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main([flag, f"flagos,{value}" if flag == "--candidates" else value])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"{flag}: unknown {value}; allowed: {allowed}" in err


def test_an_empty_name_is_refused(capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(["--candidates", "fa3,"])
    assert "has an empty item" in capsys.readouterr().err


ROWS = [
    Row("llama3-8b", "decode-b1-c512", "flagos", 10.0, 0.004, "graph"),
    Row(
        "llama3-8b",
        "decode-b1-c512",
        "triton-3d-s8",
        5.0,
        0.002,
        "events",
        "graph capture failed: X",
    ),
    Row("llama3-8b", "decode-b1-c512", "fa3", 20.0, 0.001, "graph"),
    Row("llama3-8b", "decode-b32-c2048", "flagos", 30.0, 0.003, "graph"),
    Row("llama3-8b", "decode-b32-c2048", "fa3", None, error="RuntimeError: no FA3"),
    Row("llama3-8b", "prefill-512", "flaggems-varlen", None, 0.9, error="wrong result: 0.9"),
    Row("llama3-8b", "prefill-512", "fa3", 40.0, 0.01, "graph"),
]


def _lines(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines()]


def test_table_has_a_grid_per_phase_with_ratios_to_fa3():
    lines = _lines(bench.table(ROWS))
    assert lines[0] == [
        "llama3-8b",
        "decode",
        "(us,",
        "x",
        "fa3)",
        "decode-b1-c512",
        "decode-b32-c2048",
    ]
    assert ["flagos", "10.0", "0.50x", "30.0"] in lines
    # timed with CUDA events: starred; absent from a shape: a dash
    assert ["triton-3d-s8", "5.0", "0.25x*", "-"] in lines
    assert ["fa3", "20.0", "1.00x", "error"] in lines
    assert ["llama3-8b", "prefill", "(us,", "x", "fa3)", "prefill-512"] in lines
    assert ["flaggems-varlen", "error"] in lines


def test_table_lists_errors_capture_fallbacks_and_the_worst_timed_error():
    text = bench.table(ROWS)
    assert "  fa3 on llama3-8b decode-b32-c2048: RuntimeError: no FA3" in text
    assert "  flaggems-varlen on llama3-8b prefill-512: wrong result: 0.9" in text
    assert "  triton-3d-s8 on llama3-8b decode-b1-c512: graph capture failed: X" in text
    # the wrong kernel's 0.9 is not among the timed ones
    assert "reference: 0.01 (fa3 on llama3-8b prefill-512; limit 0.05)" in text


def test_renderer_shows_the_device_versions_and_the_table(tmp_path):
    sample = {
        "device": "NVIDIA H100 80GB HBM3",
        "torch": "2.11.0",
        "triton": "3.6.0",
        "vllm": "0.24.0",
        "flag_gems": None,
        "flagos_settings": {"SEGMENTS": 16, "MIN_GRID_2D": 128},
        "rows": [
            {
                "model": "qwen3-30b-a3b",
                "shape": "prefill-4096",
                "candidate": "flagos",
                "us": 900.0,
                "max_abs_err": 0.01,
                "timing": "graph",
                "note": None,
                "error": None,
            },
            {
                "model": "qwen3-30b-a3b",
                "shape": "prefill-4096",
                "candidate": "fa3",
                "us": 300.0,
                "max_abs_err": 0.01,
                "timing": "graph",
                "note": None,
                "error": None,
            },
        ],
    }
    (tmp_path / "r.json").write_text(json.dumps(sample))
    body = report.render_region("attention r.json", tmp_path, "doc.md")
    assert "NVIDIA H100 80GB HBM3 (torch 2.11.0, triton 3.6.0, vllm 0.24.0)" in body
    assert "`flagos` with SEGMENTS=16, MIN_GRID_2D=128" in body
    assert ["flagos", "900.0", "3.00x"] in _lines(body)
    assert body.count("```") == 2


def test_the_renderer_refuses_a_missing_result_file(tmp_path):
    with pytest.raises(report.ReportError, match="result file none.json not found"):
        report.render_region("attention none.json", tmp_path, "doc.md")


def test_progress_says_the_cell_and_its_time_or_its_error():
    timed = bench.Row("llama3-8b", "decode-b1-c512", "fa3", 10.64, 0.001, "graph")
    assert bench.progress(timed) == "llama3-8b decode-b1-c512 fa3: 10.6 us (graph)"
    failed = bench.Row("llama3-8b", "prefill-512", "fa3", None, error="no FA3")
    assert bench.progress(failed) == "llama3-8b prefill-512 fa3: no FA3"

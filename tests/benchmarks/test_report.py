"""The docs' benchmark figures are rendered from the result files they describe."""

from __future__ import annotations

import json
import shutil

import pytest

from benchmarks import report
from benchmarks.bench_ops import Report, Row

RESULTS = report.ROOT / "benchmarks" / "results"
DOCS = [report.ROOT / doc for doc in report.DOCS if (report.ROOT / doc).is_file()]


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: doc.name)
def test_doc_regions_match_the_result_files(doc):
    text = doc.read_text()
    assert report.render(text) == text, f"{doc.name} is stale: run `python -m benchmarks.report`"


def test_the_docs_have_generated_regions():
    assert sum(doc.read_text().count("<!-- BEGIN GENERATED: bench ") for doc in DOCS) >= 7


def test_every_result_file_is_rendered_in_the_readme_or_the_benchmarks_doc():
    texts = [doc.read_text() for doc in DOCS]
    for path in RESULTS.glob("*.json"):
        assert any(f" benchmarks/results/{path.name}" in text for text in texts), path.name


def test_without_a_file_named_every_doc_that_exists_is_rendered(tmp_path, monkeypatch, capsys):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("# a\n")
    (tmp_path / "docs" / "benchmarks.md").write_text("# b\n")
    monkeypatch.setattr(report, "ROOT", tmp_path)
    assert report.main(["--check"]) == 0
    out = capsys.readouterr().out
    assert "README.md is up to date" in out and "docs/benchmarks.md is up to date" in out


def test_check_mode_reports_a_stale_doc_and_the_default_mode_fixes_it(tmp_path, capsys):
    shutil.copytree(RESULTS, tmp_path / "benchmarks" / "results")
    source = report.ROOT / "docs" / "benchmarks.md"
    doc = tmp_path / "benchmarks.md"
    doc.write_text(source.read_text().replace("| rms_norm | 1 | 16.3", "| rms_norm | 1 | 31.4"))
    assert report.main(["--check", "--doc", str(doc)]) == 1
    out = capsys.readouterr().out
    assert "-| rms_norm | 1 | 31.4" in out and "+| rms_norm | 1 | 16.3" in out
    assert report.main(["--doc", str(doc)]) == 0
    assert doc.read_text() == source.read_text()
    assert report.main(["--check", "--doc", str(doc)]) == 0


def _report(rows: list[Row], **kw) -> Report:
    fields = dict(device="GPU", torch="2", triton="3", copy_gbps=1000.0, date="d", rows=rows)
    return Report(**{**fields, **kw})


def _row(op, backend, tokens, eager, graph, selected=False, gbps=None, error=None) -> Row:
    return Row(op, backend, "bfloat16", tokens, eager, graph, 0, gbps, selected, error)


def test_kernels_table_bolds_the_selected_backend_and_marks_what_is_missing():
    rows = [
        _row("op", "reference.torch", 1, 9.0, None, gbps=1.0),
        _row("op", "vendor.cuda", 1, 5.0, 2.0, selected=True, gbps=500.0),
        _row("op", "default.flagos", 1, None, None, error="boom"),
        _row("op", "compile(reference)", 1, 4.0, 1.0, gbps=900.0),
    ]
    text = report.kernels(_report(rows))
    header, rule, line = text.splitlines()[-3:]
    assert header == (
        "| op (bfloat16) | tokens | flagos eager / graph | vendor:cuda eager / graph | "
        "reference eager / graph | compile(reference) eager / graph | best backend, % of copy BW |"
    )
    # the compiled reference is no backend of the dispatch: 50%, not 90%
    assert line == "| op | 1 | error | **5.0 / 2.0** | 9.0 / – | 4.0 / 1.0 | 50% |"


def test_kernels_header_names_the_recorded_model_sizes():
    model = dict(hidden=8, intermediate=16, heads=2, kv_heads=1, head_dim=4, experts=None)
    rows = [_row("a", "vendor.cuda", 1, 1.0, 1.0), _row("b", "vendor.cuda", 1, 1.0, 1.0)]
    rep = _report(rows, models={"m": model}, cases={"a": "m", "b": ""})
    text = " ".join(report.kernels(rep).split())
    assert "Input sizes: m (hidden 8, intermediate 16, 2 heads / 1 KV heads × 4): a;" in text
    assert "the ops.yaml test case's own sizes: b." in text


def test_eager_launch_and_policy_gap_are_counted_from_the_rows():
    rows = [
        _row("x", "default.flagos", 1, 40.0, 2.0),
        _row("x", "vendor.cuda", 1, 6.0, 3.0, selected=True),
        _row("x", "default.flagos", 8, 20.0, 2.0, selected=True),
        _row("x", "vendor.cuda", 8, 7.0, 2.1),
        _row("x", "default.flagos", 4096, 500.0, 490.0),
        _row("x", "vendor.cuda", 4096, 480.0, 470.0, selected=True),
    ]
    text = " ".join(report.eager_launch(_report(rows), example="x:1").split())
    assert "at up to 256 tokens (2 points" in text
    assert "took 20.0–40.0 µs (median 30.0), 30 µs or more at 1 of them" in text
    assert "`vendor:cuda` calls took 6.0–7.0 µs (median 6.5)" in text
    assert "E.g. `x` at 1 token (bfloat16): 40.0 µs against 6.0 µs." in text
    gap = " ".join(report.policy_gap(_report(rows), factor="1.1").split())
    assert "more than 1.1× slower than the fastest one at 1 of 3 points" in gap


def test_e2e_rounds_compare_greedy_tokens_with_vanilla():
    def run(config, round_no, output, decode, tokens):
        return dict(
            config=config,
            mode="eager",
            round=round_no,
            output_tok_s=output,
            decode_tok_s=decode,
            tokens=tokens,
        )

    runs = [
        run("vanilla", 1, 10.0, 20.0, [[1]]),
        run("plugin", 1, 11.0, 21.0, [[1]]),
        run("plugin", 2, 12.0, 22.0, [[2]]),
        dict(config="other", mode="eager", round=2, error="timed out"),
    ]
    lines = report.e2e_rounds(runs).splitlines()
    assert lines[2] == "| vanilla | eager | 10.0 (20.0) | – | – |"
    assert lines[3] == "| plugin | eager | 11.0 (21.0) | 12.0 (22.0) | different in 1 runs |"
    assert lines[4] == "| other | eager | – | failed | – |"


def test_e2e_engine_lists_the_engine_report_of_every_watched_run():
    engine = dict(
        jit_misses=2,
        jit_ms=1155.61,
        jit_by_kernel={"fused_moe_kernel": [2, 1155.6]},
        gc_max_ms=5.14,
        allocator={"num_alloc_retries": 0},
    )
    quiet = dict(engine, jit_misses=0, jit_ms=0, jit_by_kernel={}, allocator=None)
    runs = [
        dict(
            config="vanilla", mode="compile", round=1, generate_s_all=[1.9643, 0.76], engine=engine
        ),
        dict(config="unwatched", mode="compile", round=1, generate_s_all=[0.7]),
        dict(
            config="prefer=flagos",
            mode="compile",
            round=1,
            generate_s_all=[0.8],
            decode_s_all=[0.6, 0.65],
            engine=quiet,
        ),
    ]
    lines = report.e2e_engine(runs).splitlines()
    assert len(lines) == 4  # header, rule, the two watched runs
    assert lines[2] == (
        "| vanilla (compile) | 1 | 1.96 / 0.76 |  | 2 | 1155.6 | fused_moe_kernel (2, 1156) | 5.1 | 0 |"
    )
    assert (
        lines[3] == "| prefer=flagos (compile) | 1 | 0.80 | 0.60 / 0.65 | 0 | 0.0 | – | 5.1 | – |"
    )


def test_dispatch_costs_are_measured_against_the_matching_direct_call():
    paths = {
        "direct impl call": 30.0,
        "layer.forward_oot(x)": 70.0,
        "direct function impl": 50.0,
        "replaced function mod.fn(x)": 75.0,
        "forward_oot, compile_prefer": 130.0,
    }
    rows = [{"path": p, "ns": ns, "overhead_ns": ns - 30.0} for p, ns in paths.items()]
    result = dict(python="3.11", machine="m", date="d", repeat=3, number=10, rows=rows)
    text = " ".join(report.dispatch(result).split())
    assert "adds 25 ns to calling its impl directly, a layer's `forward_oot` 40 ns." in text
    assert "check per eager call: 60 ns more." in text


def test_dispatch_costs_name_the_direct_binding_and_the_trampoline():
    paths = {
        "direct impl call": 30.0,
        "layer.forward_oot(x)": 28.0,
        "trampoline (2 candidates)": 90.0,
        "direct function impl": 50.0,
        "replaced function mod.fn(x)": 75.0,
        "forward_oot, compile_prefer": 130.0,
    }
    rows = [{"path": p, "ns": ns, "overhead_ns": ns - 30.0} for p, ns in paths.items()]
    result = dict(python="3.11", machine="m", date="d", repeat=3, number=10, rows=rows)
    text = " ".join(report.dispatch(result).split())
    assert "differs from calling its impl directly by -2 ns where nothing can fall back" in text
    assert "adds 60 ns where a fallback is possible" in text
    assert (
        '("replaced function": the module attribute holding the op\'s trampoline) adds 25 ns.'
        in text
    )
    assert "check per eager call in its trampoline: 40 ns more." in text


@pytest.mark.parametrize(
    "spec, message",
    [
        ("kernels", "lacks a renderer and a result file"),
        ("chart benchmarks/results/h100_ops.json", "renderer 'chart' unknown; allowed: kernels,"),
        ("kernels benchmarks/results/h100_ops.json dtype", "option 'dtype' of kernels unknown"),
        ("kernels benchmarks/results/h100_ops.json colour=red", "allowed: dtype, tokens, ops"),
        ("kernels benchmarks/results/none.json", "result file benchmarks/results/none.json not"),
        ("kernels benchmarks/results/h100_ops.json dtype=int8", "no rows for dtype 'int8'"),
        ("e2e-summary benchmarks/results/h100_ops.json", "e2e-summary of benchmarks/results/h100"),
    ],
)
def test_a_bad_marker_is_named_with_its_line(spec, message, tmp_path):
    text = f"# t\n\n<!-- BEGIN GENERATED: bench {spec} -->\n<!-- END GENERATED: bench -->\n"
    with pytest.raises(report.ReportError, match="README.md:3: ") as caught:
        report.render(text)
    assert message in str(caught.value)


def test_a_region_without_end_marker_is_refused():
    with pytest.raises(report.ReportError, match="has no <!-- END GENERATED: bench -->"):
        report.render("<!-- BEGIN GENERATED: bench e2e-summary benchmarks/results/x.json -->\n")


def test_a_misspelt_end_marker_does_not_swallow_the_next_region():
    first = "<!-- BEGIN GENERATED: bench e2e-summary benchmarks/results/x.json -->"
    second = "<!-- BEGIN GENERATED: bench e2e-summary benchmarks/results/y.json -->"
    text = f"{first}\n<!-- END GENERATED -->\nprose\n{second}\n<!-- END GENERATED: bench -->\n"
    with pytest.raises(
        report.ReportError, match=r"README.md:1: .* before the next region \(line 4\)"
    ):
        report.render(text)


def test_main_reports_a_bad_marker_without_a_traceback(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(
        "<!-- BEGIN GENERATED: bench nope x.json -->\n<!-- END GENERATED: bench -->\n"
    )
    assert report.main(["--check", "--readme", str(readme)]) == 2
    assert "report: README.md:1: renderer 'nope' unknown" in capsys.readouterr().err


def test_result_files_written_before_sizes_were_recorded_still_load():
    data = json.loads((RESULTS / "h100_ops.json").read_text())
    assert "models" not in data
    assert Report.from_json(data).models == {}


def test_e2e_pairs_list_each_pair_with_its_ratios():
    result = {
        "configs": ["vanilla", "prefer=flagos"],
        "mode": "eager",
        "tokens_identical": True,
        "pairs": [
            {
                "first": "vanilla",
                "vanilla": {"output_tok_s": 100.0, "decode_tok_s": 200.0},
                "prefer=flagos": {"output_tok_s": 95.0, "decode_tok_s": 220.0},
            },
            {
                "first": "prefer=flagos",
                "prefer=flagos": {"output_tok_s": 50.0},
                "vanilla": {"output_tok_s": 40.0},
            },
        ],
    }
    lines = report.e2e_pairs(result).splitlines()
    assert lines[2].split("|")[1:-1] == [
        " 1 ",
        " vanilla ",
        " 100.0 (200.0) ",
        " 95.0 (220.0) ",
        " 0.950 (1.100) ",
    ]
    assert lines[3].split("|")[1:-1] == [" 2 ", " prefer=flagos ", " 40.0 ", " 50.0 ", " 1.250 "]
    paired = report.e2e_paired(result)
    assert paired.startswith("```\n") and "identical to vanilla's" in paired

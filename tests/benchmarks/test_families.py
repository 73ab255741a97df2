"""benchmarks.families without vLLM: what it runs, what it keeps of a run, the table it prints
and the docs' regions rendered from its file (a CPU run of the tiny GPT-2 and BERT, kept in
tests/benchmarks/data: a CPU result is not one of benchmarks/results)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from benchmarks import families, report
from benchmarks.cli import read_json
from vllm_fl.testing.families import FAMILIES, GROUPS

FIXTURE = Path(__file__).parent / "data" / "families_cpu_tiny.json"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def result() -> dict:
    return copy.deepcopy(read_json(FIXTURE))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--families", "llama,nope"], "--families: unknown nope; allowed: llama,"),
        (["--configs", "vanilla,fast"], "--configs: unknown fast; allowed: vanilla, shipped"),
        (["--configs", "shipped,portable"], "--configs: vanilla is what the others are"),
        (["--layers", "0"], "--layers and --parallel: 1 or more"),
    ],
)
def test_the_command_refuses_unknown_names_without_a_traceback(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        families.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_groups_and_names_expand_to_families_each_once():
    assert families.expand_families(["moe", "mixtral", "gpt2"]) == [*GROUPS["moe"], "gpt2"]
    assert families.expand_families(["all"]) == list(FAMILIES)


def _args(**overrides):
    args = families.parse_args(["--device", "cuda", "--parallel", "4", "--kv-cache-gib", "2"])
    for key, value in overrides.items():
        setattr(args, key, value)
    return args


def test_a_full_size_run_draws_its_weights_and_prompts_inside_the_vocabulary():
    work = families.workload(FAMILIES["bert"], _args())
    assert work.llm_args["load_format"] == "dummy"
    assert work.llm_args["runner"] == "pooling"
    assert work.llm_args["dtype"] == "bfloat16"
    assert work.llm_args["kv_cache_memory_bytes"] == 2 * 2**30
    # four engines start beside each other: each asks for a part of the GPU's free memory
    assert work.llm_args["gpu_memory_utilization"] < 0.25
    assert work.dummy_range == families.DUMMY_RANGE
    assert work.prompt_vocab == 30522
    assert work.task == "vllm_fl.testing.census:census_task"


def test_the_plugin_configurations_load_the_plugin_in_one_process():
    vanilla = families.run_env("vanilla", "cpu")
    portable = families.run_env("portable", "cpu")
    assert vanilla["VLLM_PLUGINS"] == "none"
    assert portable["VLLM_PLUGINS"] == "fl"
    assert portable["VLLM_FL_PLATFORM"] == "cpu"
    assert portable["VLLM_FL_DENY_VENDORS"] == "cuda"
    assert portable["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert "VLLM_FL_PLATFORM" not in families.run_env("shipped", "cuda") or (
        families.run_env("shipped", "cuda")["VLLM_FL_PLATFORM"] != "cpu"
    )


def test_a_plugin_run_on_vanillas_platform_is_a_failure():
    raw = {"platform": "vllm.platforms.cuda.CudaPlatform", "sequences": []}
    kept = families.summarize(raw, plugin=True)
    assert not kept["ok"] and "the plugin did not load" in kept["error"]


def test_a_gpu_census_keeps_calls_by_origin_and_the_compiled_kernels_by_name():
    raw = {
        "platform": "vllm_fl.platform.PlatformFL",
        "kernels": {
            "aten": {"void at::native::fill<float>()": 3},
            "cublas": {},
            "triton": {"_rms_norm_kernel": 4},
            "compiled": {"void vllm::act_and_mul_kernel<c10::BFloat16>(int)": 2},
        },
        "other": {"_C::silu_and_mul": 2},
        "moe": {},
        "attention": {},
        "sequences": [],
    }
    kept = families.summarize(raw, plugin=True)
    assert kept["kernel_calls"] == {"aten": 3, "cublas": 0, "triton": 4, "compiled": 2}
    assert kept["vllm_ops"] == {"_C::silu_and_mul": 2}
    name = families.short_kernel_name(next(iter(kept["compiled"])))
    assert name == "vllm::act_and_mul_kernel"


def test_the_table_says_the_cpu_has_no_kernel_census(result):
    rows = {row[0].split()[0]: row for row in families.table_rows(result)}
    assert set(rows) == {"gpt2", "bert"}
    family, shipped, portable, compiled, tokens_shipped, tokens_portable = rows["gpt2"]
    assert (shipped, portable) == ("yes", "yes")
    assert compiled == "n/a (no CUDA kernels: CPU)"
    assert tokens_shipped.startswith("2/2 identical")
    assert rows["bert"][4].startswith("embeddings: max diff")


def test_the_table_names_the_compiled_kernels_left_and_the_first_difference(result):
    portable = result["families"]["gpt2"]["runs"]["portable"]
    portable["compiled"] = {"void vllm::rms_norm_kernel<c10::BFloat16>(float)": 8}
    against = portable["against_vanilla"]
    against.update(identical=1, tokens_agreeing=11)
    row = families.table_rows(result)[0]
    assert row[3] == "1: `vllm::rms_norm_kernel`"
    assert row[5].startswith("1/2 identical, 11/16 tokens before a difference")


def test_a_family_vanilla_cannot_run_is_a_row_that_says_why(result):
    record = result["families"]["gpt2"]
    record["note"] = "transformers 4.0 has no config class for model_type 'gpt2'"
    record["runs"]["vanilla"] = {"ok": False, "error": "rc=1 | KeyError: 'gpt2'"}
    for config in ("shipped", "portable"):
        record["runs"][config].pop("against_vanilla")
    row = families.table_rows(result)[0]
    assert row[4] == row[5] == families.DASH
    assert families.vanilla_failures(result) == [f"gpt2: {record['note']}"]


def test_the_docs_region_is_rendered_from_the_file():
    spec = f"families {FIXTURE.relative_to(ROOT).as_posix()}"
    body = report.render_region(spec, ROOT, "docs/benchmarks.md")
    lines = body.splitlines()
    assert lines[0].startswith("<!-- generated from tests/benchmarks/data/families_cpu_tiny.json")
    assert "CPU (vllm 0.32.0" in body
    assert "no kernel is sorted by origin" in body
    table = [line for line in lines if line.startswith("| ")]
    assert table[0].startswith("| family | shipped runs | portable runs |")
    assert len(table) == 1 + 2  # header, gpt2, bert
    assert "| gpt2 (GPT-2, tiny) | yes | yes | n/a (no CUDA kernels: CPU) | 2/2 identical" in body


def test_the_headline_is_one_row(result):
    body = report.families_headline(result)
    header, rule, row = body.splitlines()
    assert header.startswith("| families | vanilla runs |")
    assert row == "| 2 | 2 | 2 (2) | 2 (2) | n/a (CPU) |"


def test_a_failed_run_is_described_by_its_exception_not_the_exit_warnings_after_it():
    error = (
        "Traceback (most recent call last): | ModuleNotFoundError: No module named 'flashinfer'"
        " | [rank0]:[W1129] Warning: destroy_process_group() was not called before exit"
    )
    assert families.failure_reason(error) == "ModuleNotFoundError: No module named 'flashinfer'"
    assert families.failure_reason("engine exited | rc=1") == "rc=1"

"""``benchmarks/tune_moe.py`` gives the kernel library's tuner the experts' sizes of a model of
``vllm_fl.testing.models``, or passes four sizes given on its command line through; other models are
refused."""

from __future__ import annotations

import pytest

from benchmarks import tune_moe

from vllm_fl.kernels.moe import tune


@pytest.fixture
def tuner_arguments(monkeypatch) -> list[list[str]]:
    """The argument lists the tuner is called with (it returns 0 without running)."""
    calls: list[list[str]] = []
    monkeypatch.setattr(tune, "main", lambda argv: calls.append(argv) or 0)
    return calls


def test_a_model_of_shapes_py_gives_its_experts_sizes_and_name(tuner_arguments):
    assert tune_moe.main(["--write", "--json", "out.json"]) == 0
    assert tuner_arguments == [
        [
            *("--experts", "128", "--intermediate", "768", "--hidden", "2048", "--top-k", "8"),
            *("--label", "qwen3-moe", "--write", "--json", "out.json"),
        ]
    ]


def test_four_sizes_on_the_command_line_go_to_the_tuner_as_they_are(tuner_arguments):
    argv = ["--experts", "8", "--intermediate", "14336", "--hidden", "4096", "--top-k=2"]
    assert tune_moe.main(argv) == 0
    assert tuner_arguments == [argv]


def test_models_without_experts_are_refused(capsys, tuner_arguments):
    with pytest.raises(SystemExit):
        tune_moe.main(["--shape", "llama3-8b"])
    assert "invalid choice: 'llama3-8b'" in capsys.readouterr().err
    assert tuner_arguments == []

"""The flagos attention impls run vLLM's portable Triton kernels; on the CPU those run in Triton's
interpreter (``attention_interpreted.py``, a separate process: it swaps vLLM's Triton
placeholders for the interpreter before vLLM's kernel modules load). Every test case of
``paged_attention`` and ``reshape_and_cache_flash`` in ops.yaml, on the KV-cache layouts of
vLLM 0.24 and 0.32, matches the reference within the op's tolerance: the arguments the impls
pass (window, soft cap, sinks, causal, the decode scratch of the 3D kernel, the caches'
strides), not CUDA numerics, which the GPU parity tests check."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")
pytest.importorskip("vllm")

from tests.support.interpreted_cases import script_results  # noqa: E402

SCRIPT = "tests.kernels.attention_interpreted"


@pytest.fixture(scope="module")
def results() -> dict[str, str]:
    return script_results(SCRIPT, "ATTENTION")


def test_every_case_and_layout_ran(results):
    layouts = {key.rsplit("/", 1)[1] for key in results if key.startswith("paged_attention/")}
    assert layouts == {"vllm-0.24", "vllm-0.32"}
    assert any(key.startswith("reshape_and_cache_flash/") for key in results)


def test_flagos_attention_matches_the_reference_in_the_interpreter(results):
    failed = {key: text for key, text in results.items() if text != "ok"}
    assert not failed, failed

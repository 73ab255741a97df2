"""The flagos MLA impls that run Triton kernels without FlagGems (the kernel library's context
gather, vLLM's Triton merge and decode); on the CPU those run in Triton's interpreter
(``mla_interpreted.py``, a separate process: it swaps vLLM's Triton placeholders for the
interpreter before vLLM's kernel modules load). Every test case of those ops in ops.yaml matches
the reference within the op's tolerance, the merge also on the strided views vLLM 0.32 hands it:
the arguments and layouts the impls pass, not CUDA numerics, which the GPU parity tests check."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")
pytest.importorskip("vllm")

from tests.support.interpreted_cases import script_results  # noqa: E402

SCRIPT = "tests.kernels.mla_interpreted"
OPS = {"gather_and_maybe_dequant_cache", "merge_attn_states", "mla_decode_attention"}


@pytest.fixture(scope="module")
def results() -> dict[str, str]:
    return script_results(SCRIPT, "MLA")


def test_every_op_and_the_strided_merge_ran(results):
    assert {key.split("/", 1)[0] for key in results} == OPS
    assert any(key.endswith("/strided") for key in results)


def test_flagos_mla_kernels_match_the_reference_in_the_interpreter(results):
    failed = {key: text for key, text in results.items() if text != "ok"}
    assert not failed, failed

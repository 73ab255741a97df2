"""Bring-up mode on a real checkpoint (SmolLM2-135M-Instruct, `vllm_fl.testing.checkpoint`) in
real vLLM (its CPU build) under the plugin's CPU platform, float32, with the test backend
``verify_test_backend`` (loaded through ``VLLM_FL_PLUGIN_MODULES``):

- correct kernels (its ``rms_norm``, at the model's 61 RMSNorm layers): a clean report, every
  call verified, none over tolerance, none unverified;
- beside them a wrong one (its ``silu_and_mul``, a bias of 0.5): the report names that op, at
  each of the 30 MLPs, and nothing else.

The prompts are real text (the Zen of Python), so a prefill runs hundreds of tokens through
every layer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_fl.testing import texts
from vllm_fl.testing.checkpoint import CheckpointUnavailable, real_checkpoint
from vllm_fl.testing.launch import PLUGIN_ON, vllm_available, vllm_env
from vllm_fl.verify.cli import run_verify
from vllm_fl.verify.report import summary_line

import verify_test_backend as backend

pytestmark = pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")

HERE = Path(__file__).resolve().parent
IMPL = f"vendor.{backend.VENDOR}"
LAYERS = 30
MAX_TOKENS = 4
LLM_ARGS = {"dtype": "float32", "max_model_len": 1024}


@pytest.fixture(scope="module")
def checkpoint() -> Path:
    try:
        return real_checkpoint()
    except CheckpointUnavailable as exc:
        pytest.skip(f"the real checkpoint cannot be obtained here: {exc}")


def _verify(model: Path, per_op: str):
    env = vllm_env(
        {
            **PLUGIN_ON,
            "VLLM_FL_PREFER": "reference",
            "VLLM_FL_PER_OP": per_op,
            "VLLM_FL_PLUGIN_MODULES": "verify_test_backend",
            "PYTHONPATH": str(HERE),
        }
    )
    prompts = [texts.passages()["zen"], "The capital of France is"]
    return run_verify(model, env, prompts=prompts, max_tokens=MAX_TOKENS, llm_args=LLM_ARGS)


@pytest.fixture(scope="module")
def runs(checkpoint) -> dict:
    return {
        "clean": _verify(checkpoint, f"rms_norm=vendor:{backend.VENDOR}"),
        "wrong": _verify(
            checkpoint,
            f"rms_norm=vendor:{backend.VENDOR};silu_and_mul=vendor:{backend.VENDOR}",
        ),
    }


def test_correct_kernels_give_a_clean_report_on_the_real_checkpoint(runs):
    report = runs["clean"].report
    entry = report.ops["rms_norm"]
    assert entry["impl"] == IMPL and entry["verified"] == entry["calls"] > 0, entry
    assert entry["unverified"] == 0
    assert report.exceeded == [] and report.culprits() == []
    # every RMSNorm layer of the model: two per block and the final norm
    assert len({r.site for r in report.rows if r.op == "rms_norm"}) == 2 * LAYERS + 1
    line = summary_line(report)
    assert f"{entry['verified']} call(s) verified, 0 over tolerance; 0 not verified" in line


def test_a_wrong_kernel_is_named_at_each_of_its_call_sites_and_nothing_else(runs):
    report = runs["wrong"].report
    assert report.culprits() == ["silu_and_mul"]
    over = {r.site for r in report.exceeded}
    assert over == {f"model.layers.{i}.mlp.act_fn" for i in range(LAYERS)}
    for row in report.exceeded:
        assert abs(row.max_abs - backend.BIAS) < 1e-3, row
    rms = [r for r in report.rows if r.op == "rms_norm"]
    assert rms and all(r.exceeded == 0 and r.unverified == 0 for r in rms)


def test_verification_leaves_the_tokens_as_they_are(runs):
    for run in runs.values():
        assert run.tokens == run.tokens_unverified
        assert all(len(t) == MAX_TOKENS for t in run.tokens)

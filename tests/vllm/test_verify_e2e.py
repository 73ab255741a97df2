"""Bring-up mode in real vLLM (its CPU build) under the plugin's CPU platform, on the tiny Llama
and the tiny Qwen3-MoE, with a test backend (``verify_test_backend``, loaded through
``VLLM_FL_PLUGIN_MODULES``) whose impls are selected over the reference: a small bias in
``silu_and_mul``, ``rotary_embedding`` and ``fused_experts`` wrong past a token count, correct
``rms_norm`` and ``topk_softmax``.

Per model one verification run (``run_verify``: bring-up mode on, the report merged from the
worker's JSON file) and one bisection (``run_bisect``: one engine, the configurations switched by
per-op policy; its first generation is the policy's own selection with verification off), plus
one run of the Llama with the wrong ops on the reference (the clean report).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_fl.testing.engine import SMALL_MODEL_ARGS
from vllm_fl.testing.launch import PLUGIN_ON, vllm_available, vllm_env
from vllm_fl.testing.models import build_tiny_llama, build_tiny_qwen3_moe
from vllm_fl.verify.cli import run_bisect, run_verify

import verify_test_backend as backend

pytestmark = pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")

HERE = Path(__file__).resolve().parent
MAX_TOKENS = 8
IMPL = f"vendor.{backend.VENDOR}"


def _env(**extra: str) -> dict[str, str]:
    return vllm_env(
        {
            **PLUGIN_ON,
            "VLLM_FL_PREFER": "vendor",  # the test backend's impls, not PLUGIN_ON's reference
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
            "VLLM_FL_PLUGIN_MODULES": "verify_test_backend",
            "PYTHONPATH": str(HERE),
            **extra,
        }
    )


def _runs(model: Path) -> dict:
    options = dict(max_tokens=MAX_TOKENS, llm_args=SMALL_MODEL_ARGS, timeout=420)
    return {
        "verify": run_verify(model, _env(), **options),
        "bisect": run_bisect(model, _env(), **options),
    }


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> dict:
    model = build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))
    runs = _runs(model)
    clean_env = _env(VLLM_FL_PER_OP="silu_and_mul=reference;rotary_embedding=reference")
    runs["clean"] = run_verify(
        model, clean_env, max_tokens=MAX_TOKENS, llm_args=SMALL_MODEL_ARGS, timeout=420
    )
    return runs


@pytest.fixture(scope="module")
def qwen3_moe(tmp_path_factory) -> dict:
    return _runs(build_tiny_qwen3_moe(tmp_path_factory.mktemp("tiny-qwen3-moe")))


def _rows(run, op):
    return [r for r in run.report.rows if r.op == op]


def _tokens(shapes: str) -> int:
    """The token count of a row of rotary_embedding (``positions=N ...``) or of an MoE op."""
    first = shapes.split()[0].split("=")[1]
    return int(first.split("x")[0])


def test_llama_report_names_the_biased_op_at_each_of_its_call_sites(llama):
    rows = _rows(llama["verify"], "silu_and_mul")
    assert {r.site for r in rows} == {"model.layers.0.mlp.act_fn", "model.layers.1.mlp.act_fn"}
    for row in rows:
        assert row.impl == IMPL and row.dtype == "float32"
        assert row.exceeded == row.calls > 0, row
        assert abs(row.max_abs - backend.BIAS) < 1e-4, row
    assert llama["verify"].report.ops["silu_and_mul"]["verified"] == sum(r.calls for r in rows)
    assert llama["verify"].report.processes[0]["pid"] > 0


def test_llama_kernel_wrong_past_a_token_count_is_reported_for_those_calls_only(llama):
    rows = _rows(llama["verify"], "rotary_embedding")
    sites = {"model.layers.0.self_attn.rotary_emb", "model.layers.1.self_attn.rotary_emb"}
    assert {r.site for r in rows} == sites
    over = [r for r in rows if r.exceeded]
    assert {r.site for r in over} == sites
    assert all(_tokens(r.shapes) > backend.TOKENS for r in over), over
    # up to TOKENS the kernel computes exactly what the reference computes in the call's dtype:
    # no error beyond the reference's own (the parity rule's distance is 0)
    assert all(
        r.ratio == 0 and r.exceeded == 0 for r in rows if _tokens(r.shapes) <= backend.TOKENS
    )
    assert all(r.first_exceeded["step"] == 1 for r in over)  # the prefill


def test_correct_impls_are_clean(llama, qwen3_moe):
    for run, op in ((llama["verify"], "rms_norm"), (qwen3_moe["verify"], "topk_softmax")):
        rows = _rows(run, op)
        assert rows and all(r.exceeded == 0 and r.impl == IMPL for r in rows), rows
    assert len({r.site for r in _rows(llama["verify"], "rms_norm")}) == 5
    clean = llama["clean"].report
    assert clean.rows and clean.exceeded == [], clean.exceeded
    assert {r.op for r in clean.rows} == {"rms_norm"}  # the others run the reference
    for op in ("silu_and_mul", "rotary_embedding"):  # listed, with their calls, none verified
        entry = clean.ops[op]
        assert entry["impl"] == "reference.torch" and entry["calls"] > 0 == entry["verified"]


def test_tokens_with_verification_equal_tokens_without(llama, qwen3_moe):
    for runs in (llama, qwen3_moe):
        verify = runs["verify"]
        # in the same engine with verification paused, and in another engine without it
        assert verify.tokens == verify.tokens_unverified == runs["bisect"]["selected_tokens"]
        assert len(verify.tokens[0]) == MAX_TOKENS
        # one engine step per token: the prefill gives the first, each decode step one more
        assert verify.steps == MAX_TOKENS


def test_bisection_names_the_ops_that_change_the_tokens(llama, qwen3_moe):
    result = llama["bisect"]
    assert result["divergence"] is not None
    culprits = [op for group in result["culprits"] for op in group]
    assert ["silu_and_mul"] in result["culprits"], result["tried"]
    assert "rms_norm" not in culprits and "rms_norm" in result["candidates"]
    # the policy's own generation was verified: the culprit over tolerance, the correct op not
    assert result["verdicts"]["silu_and_mul"]["over_tolerance"] > 0
    assert result["verdicts"]["rms_norm"]["verified"] > 0
    assert result["verdicts"]["rms_norm"]["over_tolerance"] == 0
    assert ["fused_experts"] in qwen3_moe["bisect"]["culprits"], qwen3_moe["bisect"]["tried"]
    assert ["topk_softmax"] not in qwen3_moe["bisect"]["culprits"]


def test_moe_ops_are_reported_at_their_moe_layer(qwen3_moe):
    run = qwen3_moe["verify"]
    experts = _rows(run, "fused_experts")
    # the MoE layer owning the weights, and for the router the block running it
    # (vLLM 0.32 keeps them in ``experts.routed_experts``)
    for i in range(2):
        assert any(r.site.startswith(f"model.layers.{i}.mlp.experts") for r in experts), experts
    assert all(".mlp.experts" in r.site for r in experts)
    assert {r.site for r in _rows(run, "topk_softmax")} == {"model.layers.0", "model.layers.1"}
    for row in experts:
        assert bool(row.exceeded) == (_tokens(row.shapes) > backend.TOKENS), row

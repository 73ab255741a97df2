"""Bring-up mode on an NVIDIA GPU: FlagGems' kernels checked against the reference inside real
vLLM (its CUDA build), on the Llama-3-8B, Qwen3-MoE and DeepSeek-V3 (MLA) shapes cut to a few
layers, dummy weights, bfloat16, ``prefer=flagos`` with the cuda vendor denied, eager, one
process.

Each run prints the report (every op's worst error against its tolerance) and the cost of
verification per engine step; with ``VLLM_FL_VERIFY_GPU_OUT=DIR`` it also writes them to
``DIR/verify_<shape>.json`` and ``.txt``. It asserts what must hold whatever the kernels' errors:
the flagos impls were verified at every op the model ran, and the tokens with verification on equal
those with it paused. Whether a kernel exceeds its parity tolerance in a real run is the finding,
not an assertion.

Marked ``gpu``: skipped without an NVIDIA GPU, vLLM's CUDA build or flag_gems; `make test-gpu` runs
it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.plugin_env import checkout_plugin_env
from vllm_fl.testing.launch import vllm_env
from vllm_fl.testing.models import write_dummy_checkpoint
from vllm_fl.verify.cli import run_verify
from vllm_fl.verify.report import format_report

pytestmark = pytest.mark.gpu("vllm", "flag_gems")

LAYERS = 4
#: ops each shape must run on FlagGems (and so be verified)
SHAPES = {
    "llama3-8b": ("rms_norm", "silu_and_mul", "rotary_embedding"),
    "qwen3-moe": ("rms_norm", "rotary_embedding", "topk_softmax", "fused_experts"),
    "deepseek-v3-2l": (
        "rms_norm",
        "grouped_topk",
        "fused_experts",
        "concat_and_cache_mla",
        "mla_prefill_attention",
        "mla_decode_attention",
        "gather_and_maybe_dequant_cache",
        "merge_attn_states",
    ),
}
#: engine arguments of a shape beyond the common ones. DeepSeek: verifying copies a call's
#: tensors, the layer's whole latent cache included, so the cache is kept small; prefill chunks
#: of 128 tokens give the 256-token prompts context read back from the cache (the gather and the
#: merge).
SHAPE_ARGS = {
    "deepseek-v3-2l": {
        "gpu_memory_utilization": 0.3,
        "max_num_batched_tokens": 128,
        "max_num_seqs": 8,
        "enable_prefix_caching": False,
    },
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_flagos_kernels_against_the_reference_in_a_real_run(shape, tmp_path):
    model = write_dummy_checkpoint(tmp_path / shape, shape, layers=LAYERS)
    env = vllm_env(
        {
            "VLLM_USE_FLASHINFER_SAMPLER": "0",
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
            "VLLM_FL_PREFER": "flagos",
            "VLLM_FL_DENY_VENDORS": "cuda",
            **checkout_plugin_env(tmp_path / "plugin-dist"),
        }
    )
    llm_args = {
        "dtype": "bfloat16",
        "max_model_len": 1024,
        "load_format": "dummy",
        "skip_tokenizer_init": True,
        "gpu_memory_utilization": 0.8,
        **SHAPE_ARGS.get(shape, {}),
    }
    run = run_verify(
        model, env, max_tokens=16, llm_args=llm_args, prompt_len=256, num_prompts=8, timeout=900
    )
    text = f"{shape}, {LAYERS} layers:\n{format_report(run.report, 80)}\n{run.cost()}"
    print(text)
    out = os.environ.get("VLLM_FL_VERIFY_GPU_OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / f"verify_{shape}.txt").write_text(text + "\n")
        data = {"cost": run.cost(), "steps": run.steps, **run.report.to_json()}
        (Path(out) / f"verify_{shape}.json").write_text(json.dumps(data, indent=1))
    for op in SHAPES[shape]:
        entry = run.report.ops.get(op)
        assert entry and entry["impl"] == "default.flagos" and entry["verified"] > 0, (op, entry)
    assert run.tokens == run.tokens_unverified

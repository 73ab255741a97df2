"""Real vLLM (its CPU build) with the plugin on a quantized MoE checkpoint: a tiny Qwen3-MoE whose
experts are FP8 block-quantised (128x128 weight blocks, ``weight_scale_inv``, the layout of
Qwen3-30B-A3B-FP8 and DeepSeek-V3) generates under the plugin's CPU platform, in vLLM's default
process layout, its experts computed by the op ``fused_experts_quant``.

What the tokens are compared with: the same model unquantized, every expert weight replaced by
what its FP8 values stand for (the dequantised checkpoint). The two differ only in the FP8
quantisation of the experts' activations (per token and group of 128, as the FP8 block scheme
does), so their greedy outputs part ways once that noise tips a near-tie. The comparison is
therefore step by step: the dequantised model, fed the FP8 run's tokens, must find each of them
at or near its own best choice (a few hundredths of a nat on average; experts with scales three
times too large miss by more than a nat on average and by up to 8.6 nats).

Vanilla vLLM's CPU platform has no FP8 MoE kernel for this checkpoint (its oracle answers
``NONE`` and loading fails), so vanilla is no reference here.
"""

from __future__ import annotations

import pytest

from vllm_fl.testing import scoring
from vllm_fl.testing.engine import TEXT_PROMPTS
from vllm_fl.testing.launch import PLUGIN_ON, run_vllm, vllm_available
from vllm_fl.testing.models import build_tiny_fp8_qwen3_moe

pytestmark = pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")

MULTI_PROCESS = {**PLUGIN_ON, "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}
MAX_TOKENS = 16
#: nats below the dequantised model's best token that a token of the FP8 run may lie
MAX_GAP = 1.5
MAX_MEAN_GAP = 0.2


@pytest.fixture(scope="module")
def fp8_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-fp8-qwen3-moe")
    return (
        build_tiny_fp8_qwen3_moe(root / "fp8"),
        build_tiny_fp8_qwen3_moe(root / "dequantised", dequantised=True),
    )


@pytest.fixture(scope="module")
def fp8_run(fp8_models):
    # FP8 checkpoints need 16-bit activations in vLLM (float32 is refused for quantization fp8)
    return run_vllm(fp8_models[0], MULTI_PROCESS, dtype="bfloat16", max_tokens=MAX_TOKENS)


def test_fp8_block_moe_runs_its_experts_through_the_dispatch(fp8_run):
    assert fp8_run.result["platform"].endswith(".PlatformFLCpu")
    assert fp8_run.lines("vllm_fl: quantized MoE experts (fp8_w8a8, block [128, 128]) computed")
    assert fp8_run.lines("FP8 MoE (block, channel or tensor scales) (op fused_experts_quant)")
    assert fp8_run.lines("Op 'fused_experts_quant' using 'reference.torch'")
    tokens = fp8_run.result["tokens"]
    assert [len(t) for t in tokens] == [MAX_TOKENS] * len(TEXT_PROMPTS)
    assert len(set(tokens[0])) > 4, tokens  # not a degenerate repetition


def test_the_dequantised_model_agrees_with_every_fp8_token(fp8_models, fp8_run):
    scored = run_vllm(
        fp8_models[1],
        {**MULTI_PROCESS, "VLLM_ALLOW_INSECURE_SERIALIZATION": "1"},  # collective_rpc
        dtype="bfloat16",
        task=scoring.TASK,
        task_options={"prompts": list(TEXT_PROMPTS), "continuations": fp8_run.result["tokens"]},
    ).result
    gaps = [gap for sequence in scored["gaps"] for gap in sequence]
    assert len(gaps) == MAX_TOKENS * len(TEXT_PROMPTS)
    assert max(gaps) < MAX_GAP, scored
    assert sum(gaps) / len(gaps) < MAX_MEAN_GAP, scored

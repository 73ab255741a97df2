"""Real vLLM (its CPU build) with the plugin, end to end, on a tiny model the tests build.

Each configuration runs once in its own interpreter (see tests/vllm/conftest.py); the tests below
assert on those runs: greedy tokens identical with and without the plugin, in eager and in
compile mode; our forward_oot is what ran for RMSNorm, SiluAndMul and RotaryEmbedding (the
layer classes vLLM built, the forward method CustomOp bound, the dispatch's record and its log);
the linear layers and the LM head computed through op linear;
the attention layers ran the plugin's attention backend, its cache write and attention on the
dispatch; a blacklist keeps vLLM's layer; the entry points load in vLLM's multi-process mode.
"""

from __future__ import annotations

import pytest

from vllm_fl.testing.launch import PLUGIN_OFF, PLUGIN_ON, REPLACED, vllm_available

pytestmark = pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")


def _assert_ours_ran(run, layers=REPLACED) -> None:
    result = run.result
    assert result["platform"].endswith(".PlatformFLCpu"), result["platform"]
    for layer, op in layers.items():
        cls_path = result["layer_classes"][layer]
        assert cls_path.startswith("vllm_fl.ops."), f"{layer} is {cls_path}, not ours"
        assert result["forward_methods"][layer] == "forward_oot", result["forward_methods"]
        assert result["used_impls"].get(op) == "reference.torch", result["used_impls"]
        assert run.lines(f"Op '{op}' using 'reference.torch'"), f"no dispatch log for {op}"


@pytest.mark.parametrize("mode", ["eager", "compile"])
def test_plugin_generates_the_same_tokens_as_vanilla_vllm(vllm_runs, mode):
    vanilla = vllm_runs(f"{mode}, plugin off", PLUGIN_OFF, mode=mode)
    plugin = vllm_runs(f"{mode}, plugin on", PLUGIN_ON, mode=mode)
    assert vanilla.result["platform"].endswith(".CpuPlatform"), vanilla.result["platform"]
    assert "vllm_fl" not in str(vanilla.result["layer_classes"])
    assert plugin.result["tokens"] == vanilla.result["tokens"]
    assert len(plugin.result["tokens"][0]) == 24


ATTENTION_BACKEND_LOG = "vllm_fl: attention backend vllm_fl.attention.backend.AttentionBackendFL"


def _assert_our_attention_ran(run) -> None:
    """The attention layers were built on the plugin's backend (selected by the dispatch op
    attention_backend on the CPU platform) and its ops were resolved to the reference."""
    result = run.result
    assert result["attention_backends"] == {
        "vllm_fl.attention.backend.AttentionBackendFL": "vllm_fl.attention.backend.AttentionImplFL"
    }, result["attention_backends"]
    for op in ("attention_backend", "reshape_and_cache_flash", "paged_attention"):
        assert result["used_impls"].get(op) == "reference.torch", result["used_impls"]
    assert run.lines(ATTENTION_BACKEND_LOG)


@pytest.mark.parametrize("mode", ["eager", "compile"])
def test_the_plugins_attention_backend_ran(vllm_runs, mode):
    _assert_our_attention_ran(vllm_runs(f"{mode}, plugin on", PLUGIN_ON, mode=mode))


@pytest.mark.parametrize("mode", ["eager", "compile"])
def test_forward_oot_of_our_layers_ran(vllm_runs, mode):
    plugin = vllm_runs(f"{mode}, plugin on", PLUGIN_ON, mode=mode)
    _assert_ours_ran(plugin)
    assert plugin.lines("replaced vLLM layers: ")


@pytest.mark.parametrize("mode", ["eager", "compile"])
def test_the_start_up_log_names_only_the_ops_the_llama_uses(vllm_runs, mode):
    """The dense Llama's layers and attention, logged; the manifest's MoE, MLA and quantized
    ops, which it never calls, not; the summary counts what was logged."""
    plugin = vllm_runs(f"{mode}, plugin on", PLUGIN_ON, mode=mode)
    named = {
        line.split("'")[1]
        for line in plugin.lines("Op '")
        if " using '" in line and "under torch.compile" not in line
    }
    used = {
        *REPLACED.values(),
        "attention_backend",
        "reshape_and_cache_flash",
        "paged_attention",
        "linear",
    }
    assert used <= named, used - named
    unused = {"fused_experts", "topk_softmax", "mla_decode_attention", "int8_scaled_mm", "gelu_new"}
    assert not named & unused, named & unused
    (summary,) = plugin.lines("vllm_fl: the model uses ")
    assert f"uses {len(named)} of the " in summary, (summary, sorted(named))


@pytest.mark.parametrize("mode", ["eager", "compile"])
def test_linear_layers_and_lm_head_ran_op_linear(vllm_runs, mode):
    """The projections and the LM head computed through op linear on the reference (vLLM's
    dispatcher handed their methods the plugin's adapters); under torch.compile the layers'
    calls are in the compiled graph, the LM head's (outside it) still eager. The tokens are
    vanilla's: test_plugin_generates_the_same_tokens_as_vanilla_vllm."""
    plugin = vllm_runs(f"{mode}, plugin on", PLUGIN_ON, mode=mode)
    result = plugin.result
    assert len(result["linear_sites"]) == 2, result["linear_sites"]
    calls = result["linear_calls"]
    assert calls["lm_head"] > 0, calls
    if mode == "eager":
        # 4 projections per layer (qkv, o, gate_up, down), 2 layers, each forward step
        assert calls["linear_layers"] >= 8 * calls["lm_head"], calls
    else:
        assert result["used_impls_traced"]["linear"] == "reference.torch", result
    assert result["used_impls"]["linear"] == "reference.torch", result["used_impls"]
    assert plugin.lines("Op 'linear' using 'reference.torch'")


def test_compile_mode_keeps_our_ops_enabled(vllm_runs):
    plugin = vllm_runs("compile, plugin on", PLUGIN_ON, mode="compile")
    added = plugin.lines("custom_ops += ")
    assert len(added) == 1 and all(f"+{op}" in added[0] for op in REPLACED.values()), added


def test_blacklist_keeps_vllms_rms_norm(vllm_runs):
    run = vllm_runs("eager, RMSNorm blacklisted", {**PLUGIN_ON, "VLLM_FL_OOT_BLACKLIST": "RMSNorm"})
    layers = run.result["layer_classes"]
    assert layers["RMSNorm"] == "vllm.model_executor.layers.layernorm.RMSNorm"
    _assert_ours_ran(run, {k: v for k, v in REPLACED.items() if k != "RMSNorm"})
    assert run.lines("kept vLLM's (env VLLM_FL_OOT_BLACKLIST): RMSNorm")
    vanilla = vllm_runs("eager, plugin off", PLUGIN_OFF)
    assert run.result["tokens"] == vanilla.result["tokens"]


def _multi_process_run(vllm_runs):
    env = {**PLUGIN_ON, "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}
    return vllm_runs("eager, multi-process", env, watch_engine=True)


def test_entry_points_load_in_multiprocess_mode(vllm_runs):
    """vLLM's default layout: the model runs in another process (the engine core or a worker),
    and the plugin does its work there, never in the front-end (MainProcess)."""
    run = _multi_process_run(vllm_runs)
    assert run.result["platform"].endswith(".PlatformFLCpu")
    replaced = run.lines("replaced vLLM layers: ")
    assert replaced and not [ln for ln in replaced if "MainProcess" in ln], replaced
    for layer in REPLACED:
        assert f"{layer} -> " in replaced[0]
    # the attention backend is chosen where the model is built, never in the front-end
    chosen = run.lines(ATTENTION_BACKEND_LOG)
    assert chosen and not [ln for ln in chosen if "MainProcess" in ln], chosen
    vanilla = vllm_runs("eager, plugin off", PLUGIN_OFF)
    assert run.result["tokens"] == vanilla.result["tokens"]


def test_the_engine_watch_reports_from_the_engine_process(vllm_runs):
    """bench_e2e --watch-engine: the garbage collector's pauses and the allocator's retries come
    from the process that runs the model, not from the caller's."""
    result = _multi_process_run(vllm_runs).result
    engine = result["engine"]
    assert engine["pid"] != result["runner_pid"]
    assert engine["gc_collections"] >= engine["gc_full_collections"] >= 0
    assert engine["gc_ms"] >= engine["gc_max_ms"] >= 0
    assert engine["jit_ms"] >= engine["jit_max_ms"] >= 0
    assert engine["allocator"] is None  # the CPU build has no caching allocator's counters

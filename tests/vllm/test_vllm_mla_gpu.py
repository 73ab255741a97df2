"""Real vLLM on an NVIDIA GPU running a tiny DeepSeek-V3 (multi-head latent attention with
DeepSeek's 16 heads of 128 + 64 and 128, grouped MoE routing) in bfloat16, one process.

- The shipped policy (the cuda vendor preferred) serves it as vanilla vLLM does, eager and
  compiled with CUDA graphs: the platform keeps vLLM's MLA backend, the MLA functions the plugin
  routes through the dispatch (the cache write, the context gather, the merge) run vLLM's own
  kernels, and the greedy tokens are vanilla's.
- ``prefer=flagos`` with the cuda vendor denied selects the plugin's MLA backend, whose ops run
  on FlagGems' and vLLM's portable Triton kernels; its first token of every prompt (the prefill's
  argmax) is vanilla's. How many later tokens agree is printed, not asserted: bfloat16 kernels
  that add in another order may flip a close greedy choice after a few steps.

Marked ``gpu``: skipped without an NVIDIA GPU or vLLM's CUDA build (the flagos run also needs
flag_gems); `make test-gpu` runs it.
"""

from __future__ import annotations

import pytest

from tests.support.plugin_env import checkout_plugin_env
from vllm_fl.testing.launch import PLUGIN_NAME
from vllm_fl.testing.models import build_tiny_deepseek_v3

pytestmark = pytest.mark.gpu("vllm")

DTYPE = "bfloat16"
BASE = {"VLLM_USE_FLASHINFER_SAMPLER": "0"}
MLA_BACKEND = "vllm_fl.attention.mla.backend.MLABackendFL"
FLAGOS_DENY_CUDA = {"VLLM_FL_PREFER": "flagos", "VLLM_FL_DENY_VENDORS": "cuda"}
#: the MLA ops the plugin's backend calls and the vLLM functions it routes
MLA_OPS = ("concat_and_cache_mla", "mla_prefill_attention", "mla_decode_attention")
ROUTED = ("concat_and_cache_mla", "gather_and_maybe_dequant_cache", "merge_attn_states")


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory) -> dict[str, str]:
    return {
        **BASE,
        **checkout_plugin_env(tmp_path_factory.mktemp("plugin-dist")),
        "VLLM_PLUGINS": PLUGIN_NAME,
    }


@pytest.fixture(scope="module")
def gpu_mla_model(tmp_path_factory):
    return build_tiny_deepseek_v3(
        tmp_path_factory.mktemp("tiny-deepseek-v3-gpu"),
        heads=16,
        qk_nope_head_dim=128,
        v_head_dim=128,
    )


def _vanilla(vllm_runs, model, mode: str):
    env = {**BASE, "VLLM_PLUGINS": "none"}
    return vllm_runs(f"gpu mla {mode}, plugin off", env, mode=mode, dtype=DTYPE, model=model)


@pytest.mark.parametrize("mode", ["eager", "compile"])
def test_the_shipped_policy_serves_mla_as_vanilla(vllm_runs, plugin_env, gpu_mla_model, mode):
    vanilla = _vanilla(vllm_runs, gpu_mla_model, mode)
    plugin = vllm_runs(
        f"gpu mla {mode}, plugin on", plugin_env, mode=mode, dtype=DTYPE, model=gpu_mla_model
    )
    assert plugin.result["platform"] == "vllm_fl.platform.cuda.PlatformFL", plugin.lines("vllm_fl")
    assert not plugin.lines(f"attention backend {MLA_BACKEND}")
    routed = plugin.lines("vLLM functions routed through the dispatch")
    assert routed and all(f"-> {op}" in routed[0] for op in ROUTED), routed
    if mode == "eager":
        used = {op: plugin.result["used_impls"].get(op) for op in ROUTED}
        assert used == {op: "vendor.cuda" for op in ROUTED}, plugin.result["used_impls"]
    assert plugin.result["tokens"] == vanilla.result["tokens"]


@pytest.mark.gpu("vllm", "flag_gems")
def test_flagos_runs_the_plugins_mla_backend(vllm_runs, plugin_env, gpu_mla_model):
    vanilla = _vanilla(vllm_runs, gpu_mla_model, "eager")
    plugin = vllm_runs(
        "gpu mla eager, flagos, cuda denied",
        {**plugin_env, **FLAGOS_DENY_CUDA},
        dtype=DTYPE,
        model=gpu_mla_model,
    )
    assert plugin.lines(f"attention backend {MLA_BACKEND}"), plugin.lines("vllm_fl")
    assert plugin.lines("MLA prefill attention runs through the dispatch")
    used = {op: plugin.result["used_impls"].get(op) for op in (*MLA_OPS, *ROUTED)}
    assert used == {op: "default.flagos" for op in used}, plugin.result["used_impls"]
    ours, theirs = plugin.result["tokens"], vanilla.result["tokens"]
    agree = sum(a == b for mine, other in zip(ours, theirs) for a, b in zip(mine, other))
    print(f"flagos (cuda denied) vs vanilla: {agree} of {sum(map(len, theirs))} tokens agree")
    assert [seq[0] for seq in ours] == [seq[0] for seq in theirs]

"""Another plugin registering its own out-of-tree class for a layer the plugin also replaces:
real vLLM runs with both plugins installed, its entry points loaded before ours and after ours.
No `AssertionError: Duplicate op name`, the other plugin's class is the one vLLM builds for that
layer, one INFO line names it, and ours still replace every other layer."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.plugin_env import write_dist_info
from vllm_fl.testing.launch import PLUGIN_NAME, PLUGIN_ON, vllm_available

pytestmark = pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")

OTHER_CLASS = "other_oot_plugin.RotaryEmbeddingOther"


@pytest.fixture(scope="module")
def other_plugin_dist(tmp_path_factory) -> Path:
    """A folder holding a plugin `other`: its module (other_oot_plugin.py, next to this file)
    and its dist-info."""
    root = tmp_path_factory.mktemp("other-plugin")
    shutil.copy(Path(__file__).with_name("other_oot_plugin.py"), root)
    return write_dist_info(
        root,
        "vllm-other-plugin",
        "0.1",
        {"vllm.general_plugins": {"other": "other_oot_plugin:register"}},
    )


@pytest.mark.parametrize("order", ["other first", "fl first"])
def test_other_plugins_class_wins_for_its_layer_only(vllm_runs, other_plugin_dist, order):
    env = {**PLUGIN_ON, "VLLM_PLUGINS": f"{PLUGIN_NAME},other"}
    if order == "other first":
        env["PYTHONPATH"] = str(other_plugin_dist)
        where = {}
    else:
        where = {"append_path": str(other_plugin_dist)}
    run = vllm_runs(f"eager, another plugin, {order}", env, **where)
    layers = run.result["layer_classes"]
    assert layers["RotaryEmbedding"] == OTHER_CLASS, layers
    assert layers["RMSNorm"].startswith("vllm_fl.ops."), layers
    assert layers["SiluAndMul"].startswith("vllm_fl.ops."), layers
    named = [ln for ln in run.lines("another plugin") if "RotaryEmbeddingOther" in ln]
    assert len(named) == 1 and "INFO" in named[0], run.lines("vllm_fl")
    vanilla = vllm_runs("eager, plugin off", {"VLLM_PLUGINS": "none"})
    assert run.result["tokens"] == vanilla.result["tokens"]

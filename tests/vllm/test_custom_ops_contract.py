"""`compilation_config.custom_ops` keeps vLLM's meaning with the plugin's platform active.

vLLM's own contract (tests/model_executor/test_enabled_custom_ops.py) is ported in
custom_ops_contract.py and run in a fresh interpreter with PlatformFLCpu and the plugin's classes
registered. Where the user wrote `custom_ops`, every case must give vLLM's expected result: the
layer (ours, where we replace it) is enabled exactly when vLLM's registered class is, and a
disabled layer runs vLLM's `forward_native`. Only where the user left vLLM's default does the
plugin enable its layers under Inductor, and it says so once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_fl.testing.launch import PLUGIN_ON, vllm_available

pytestmark = pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")

SCRIPT = Path(__file__).with_name("custom_ops_contract.py")
LAYERS = ("rms_norm", "silu_and_mul", "relu3")

# vLLM's expected [rms_norm, silu_and_mul, relu3] and default_on for the explicit cases
# (gelu_and_mul is left out: vLLM's CPU platform itself adds +gelu_and_mul on some CPUs).
EXPLICIT = {
    ("+rms_norm,-silu_and_mul", 0, "inductor"): ([1, 0, 1], True),
    ("none,-rms_norm,+relu3", 1, "eager"): ([0, 0, 1], False),
    ("all,-silu_and_mul", 2, "inductor"): ([1, 0, 1], True),
    ("-relu3,+relu2", 3, "eager"): ([1, 1, 0], True),
    ("none,-relu3,+rms_norm,+silu_and_mul", 3, "eager"): ([1, 1, 0], False),
    ("-rms_norm", 3, "eager"): ([0, 1, 1], True),
    ("none,+relu3", 3, "inductor"): ([0, 0, 1], False),
    ("all,-rms_norm", 3, "inductor"): ([0, 1, 1], True),
    ("none", 3, "inductor"): ([0, 0, 0], False),
    ("none", 0, "eager"): ([0, 0, 0], False),
    ("none,+rms_norm", 3, "inductor"): ([1, 0, 0], False),
    ("-silu_and_mul", 3, "inductor"): ([0, 0, 0], False),
    ("-silu_and_mul", 0, "eager"): ([1, 0, 1], True),
}
# Left at vLLM's default: [rms_norm, silu_and_mul, relu3]; the plugin enables what it replaces.
DEFAULT = {
    (None, 0, "eager"): [1, 1, 1],
    (None, 3, "eager"): [1, 1, 1],
    (None, 0, "inductor"): [1, 1, 1],
    (None, 1, "inductor"): [1, 1, 0],
    (None, 3, "inductor"): [1, 1, 0],
}


@pytest.fixture(scope="module")
def contract() -> tuple[dict, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    env.update(PLUGIN_ON)
    proc = subprocess.run(
        [sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=300
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    assert "PLATFORM PlatformFLCpu" in proc.stdout, output[-4000:]
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("CONTRACT "):
            r = json.loads(line[len("CONTRACT ") :])
            results[tuple(r["case"])] = r
    return results, output


def _check_consistent(r: dict) -> None:
    for name in (*LAYERS, "gelu_and_mul"):
        layer = r[name]
        assert layer["enabled"] == layer["registry_enabled"], (name, r)
        if layer["enabled"]:
            assert layer["forward"] == "forward_oot", (name, r)
        else:  # vLLM's own, possibly compiled by CustomOp.maybe_compile
            assert layer["forward"] in ("forward_native", "compiled forward_native"), (name, r)


@pytest.mark.parametrize("case", list(EXPLICIT), ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}")
def test_explicit_custom_ops_keep_vllms_meaning(contract, case):
    results, _ = contract
    r = results[case]
    expected, default_on = EXPLICIT[case]
    assert r["rms_norm"]["class"].startswith("vllm_fl."), r  # our layer, vLLM's switches
    assert r["default_on"] == default_on, r
    assert [int(r[name]["enabled"]) for name in LAYERS] == expected, r
    _check_consistent(r)
    assert not [op for op in r["custom_ops"] if op.lstrip("+-") in ("RMSNorm", "SiluAndMul")], r


@pytest.mark.parametrize("case", list(DEFAULT), ids=lambda c: f"default-{c[1]}-{c[2]}")
def test_default_custom_ops_enable_the_replaced_layers(contract, case):
    results, _ = contract
    r = results[case]
    assert [int(r[name]["enabled"]) for name in LAYERS] == DEFAULT[case], r
    _check_consistent(r)


def test_the_applied_default_is_logged_once(contract):
    _, output = contract
    lines = [ln for ln in output.splitlines() if "left at vLLM's default" in ln]
    assert len(lines) == 1, lines
    assert "+rms_norm" in lines[0] or "enabled by it" in lines[0], lines

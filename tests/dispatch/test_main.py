"""``python -m vllm_fl.dispatch explain [--table]``."""

import os
import subprocess
import sys


def test_cli_explain_subprocess(tmp_path):
    plugin = tmp_path / "my_plugin.py"
    plugin.write_text(
        "from vllm_fl.dispatch import OpImpl\n"
        "def f(x):\n    return x\n"
        "def register(reg):\n    reg.register_impl(OpImpl('my_op', 'reference.mine', 'reference', f))\n"
    )
    env = {
        "PYTHONPATH": str(tmp_path),
        "VLLM_FL_PLUGIN_MODULES": "my_plugin",
        "VLLM_FL_PREFER": "vendor",
    }
    r = subprocess.run(
        [sys.executable, "-m", "vllm_fl.dispatch", "explain"],
        capture_output=True,
        text=True,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("VLLM_FL_")}, **env},
    )
    assert r.returncode == 0, r.stderr
    assert (
        "Op 'my_op': order vendor > flagos > reference from prefer=vendor (env VLLM_FL_PREFER)"
        in r.stdout
    )
    assert "selected: reference.mine" in r.stdout
    r = subprocess.run(
        [sys.executable, "-m", "vllm_fl.dispatch", "explain", "--table"],
        capture_output=True,
        text=True,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("VLLM_FL_")}, **env},
    )
    assert r.returncode == 0 and "my_op" in r.stdout and "| reference.mine" in r.stdout
    r = subprocess.run(
        [sys.executable, "-m", "vllm_fl.dispatch", "explain"],
        capture_output=True,
        text=True,
        env={**os.environ, "VLLM_FL_STRICT": "maybe"},
    )
    assert r.returncode == 2 and "VLLM_FL_STRICT='maybe': invalid boolean" in r.stderr

"""Runs vLLM in a subprocess (tests/integration/vllm_runner.py) and parses what it printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
RUNNER = HERE / "vllm_runner.py"
RESULT_PREFIX = "VLLM_FL_RESULT "

# Our entry points' name in both groups (pyproject.toml); VLLM_PLUGINS is vLLM's allow-list.
PLUGIN_NAME = "fl"
PLUGIN_OFF = {"VLLM_PLUGINS": "none"}
PLUGIN_ON = {"VLLM_PLUGINS": PLUGIN_NAME, "VLLM_FL_PLATFORM": "cpu"}
#: in-tree layers of the tiny Llama the plugin replaces -> their op
REPLACED = {
    "RMSNorm": "rms_norm",
    "SiluAndMul": "silu_and_mul",
    "RotaryEmbedding": "rotary_embedding",
}


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


@dataclass
class VllmRun:
    """One vLLM subprocess: its parsed result line, its whole output, its wall time."""

    env: dict[str, str]
    result: dict
    output: str
    wall_s: float

    def lines(self, needle: str) -> list[str]:
        return [line for line in self.output.splitlines() if needle in line]


def vllm_env(env: dict[str, str]) -> dict[str, str]:
    """`env` on top of a clean environment for a vLLM subprocess: no inherited VLLM_* variables,
    offline, 1 GiB of KV cache."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    full_env.update(
        {
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
    )
    full_env.update(env)
    return full_env


def run_vllm(
    model: Path,
    env: dict[str, str],
    *,
    mode: str = "eager",
    dtype: str = "float32",
    max_tokens: int = 24,
    num_prompts: int | None = None,
    timeout: float = 420,
) -> VllmRun:
    """Run the runner in a fresh interpreter with `env` on top of a clean environment (no
    inherited VLLM_* variables; offline; 1 GiB of KV cache; one process unless `env` says)."""
    full_env = vllm_env({"VLLM_ENABLE_V1_MULTIPROCESSING": "0", **env})
    cmd = [sys.executable, str(RUNNER), "--model", str(model), "--mode", mode, "--dtype", dtype]
    cmd += ["--max-tokens", str(max_tokens)]
    if num_prompts is not None:
        cmd += ["--num-prompts", str(num_prompts)]
    start = time.perf_counter()
    proc = subprocess.run(
        cmd,
        env=full_env,
        cwd=str(Path(model).parent),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
    wall = time.perf_counter() - start
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if proc.returncode != 0 or not lines:
        tail = "\n".join(proc.stdout.splitlines()[-80:])
        raise AssertionError(f"vLLM run failed (rc={proc.returncode}, env={env}):\n{tail}")
    result = json.loads(lines[-1][len(RESULT_PREFIX) :])
    return VllmRun(env=env, result=result, output=proc.stdout, wall_s=wall)


def write_dist_info(
    folder: Path, name: str, version: str, entry_points: dict[str, dict[str, str]]
) -> Path:
    """A distribution `name` with `entry_points` (group -> name -> target), as pip would record
    it, in `folder`: on a subprocess's PYTHONPATH, vLLM finds its plugins. Returns `folder`."""
    info = folder / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    groups = [
        f"[{group}]\n" + "".join(f"{key} = {target}\n" for key, target in entries.items())
        for group, entries in entry_points.items()
    ]
    (info / "entry_points.txt").write_text("\n".join(groups))
    return folder


def checkout_plugin_env(folder: Path) -> dict[str, str]:
    """PYTHONPATH for a vLLM subprocess that finds this checkout's plugin as if it were installed,
    also where it is not (a GPU machine whose Python has vLLM but not this project): the
    checkout, and a dist-info in `folder` with pyproject.toml's entry points, ahead of any other
    installed copy of the plugin."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    write_dist_info(folder, project["name"], project["version"], project["entry-points"])
    path = [str(folder), str(REPO), os.environ.get("PYTHONPATH", "")]
    return {"PYTHONPATH": os.pathsep.join(p for p in path if p)}

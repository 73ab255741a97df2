"""Runs vLLM in a fresh interpreter (vllm_runner.py) and reads back what it reported.

`launch` is the one way the benchmarks and the tests start vLLM: the caller gives the complete
environment and a `Workload`; a failed run comes back with its output, not as an exception.
`run_vllm` is the tests' form: the tiny model, a clean environment (`vllm_env`), one process
unless the environment says otherwise, and an AssertionError showing the output when vLLM fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from vllm_runner import (  # noqa: F401  (RESULT_PREFIX: part of the API)
    RESULT_PREFIX,
    SMALL_MODEL_ARGS,
    Workload,
)

RUNNER = Path(__file__).resolve().parent / "vllm_runner.py"
REPO = Path(__file__).resolve().parents[1]

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
    """One vLLM subprocess: its result (None when it failed), its whole output (stdout and
    stderr interleaved), its exit status and wall time."""

    env: dict[str, str]
    result: dict | None
    output: str
    wall_s: float
    returncode: int = 0

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.result is not None

    def lines(self, needle: str) -> list[str]:
        return [line for line in self.output.splitlines() if needle in line]

    def tail(self, lines: int) -> list[str]:
        return self.output.strip().splitlines()[-lines:]


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


def launch(
    model: str | Path,
    workload: Workload,
    env: dict[str, str],
    *,
    timeout: float,
    cwd: str | Path | None = None,
) -> VllmRun:
    """Run `workload` on `model` in a fresh interpreter with exactly the environment `env`.
    Raises subprocess.TimeoutExpired when it outlives `timeout` seconds."""
    with tempfile.TemporaryDirectory(prefix="vllm-run-") as tmp:
        result_file = Path(tmp) / "result.json"
        cmd = [sys.executable, str(RUNNER), "--model", str(model), *workload.argv()]
        cmd += ["--result", str(result_file)]
        start = time.perf_counter()
        proc = subprocess.run(
            cmd,
            env=env,
            cwd=None if cwd is None else str(cwd),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
        )
        wall = time.perf_counter() - start
        # The result travels in a file: a long line on stdout could interleave with the log
        # lines of vLLM's engine process, which writes to the same pipe.
        result = None
        if proc.returncode == 0 and result_file.exists():
            result = json.loads(result_file.read_text())
    return VllmRun(
        env=env, result=result, output=proc.stdout, wall_s=wall, returncode=proc.returncode
    )


def run_vllm(
    model: Path,
    env: dict[str, str],
    *,
    mode: str = "eager",
    dtype: str = "float32",
    max_tokens: int = 24,
    num_prompts: int | None = None,
    timeout: float = 420,
    watch_engine: bool = False,
) -> VllmRun:
    """Run the tiny model's text prompts in a fresh interpreter with `env` on top of a clean
    environment (no inherited VLLM_* variables; offline; 1 GiB of KV cache; one process unless
    `env` says). float32 suits the CPU; a GPU needs bfloat16 or float16 (vLLM's FlashAttention
    refuses float32). Raises AssertionError with the run's output when vLLM fails."""
    full_env = vllm_env({"VLLM_ENABLE_V1_MULTIPROCESSING": "0", **env})
    llm_args = {**SMALL_MODEL_ARGS, "dtype": dtype}
    workload = Workload(
        mode=mode,
        max_tokens=max_tokens,
        num_prompts=num_prompts,
        llm_args=llm_args,
        watch_engine=watch_engine,
    )
    run = launch(model, workload, full_env, timeout=timeout, cwd=Path(model).parent)
    if not run.ok:
        tail = "\n".join(run.tail(80))
        raise AssertionError(f"vLLM run failed (rc={run.returncode}, env={env}):\n{tail}")
    return replace(run, env=env)


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

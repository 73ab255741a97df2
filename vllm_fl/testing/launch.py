"""Runs vLLM in a fresh interpreter (`vllm_fl.testing.engine`) and reads back what it reported.

`launch` is the one way the benchmarks and the tests start vLLM: the caller gives the complete
environment and a `Workload`; a failed run comes back with its output, not as an exception.
`start_resident` keeps an engine up that generates a batch per command (two of them can take
turns). `run_vllm` is the tests' form: a clean environment (`vllm_env`), one process unless the
environment says otherwise, and an AssertionError showing the output when vLLM fails.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from vllm_fl.testing import zygotes
from vllm_fl.testing.child import ChildRun, ResidentChild
from vllm_fl.testing.engine import SMALL_MODEL_ARGS, Workload

#: the directory that holds the vllm_fl package: on the child's path, so that it runs this code
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
ENGINE = [sys.executable, "-m", "vllm_fl.testing.engine"]

# Our entry points' name in both groups (pyproject.toml); VLLM_PLUGINS is vLLM's allow-list.
PLUGIN_NAME = "fl"
PLUGIN_OFF = {"VLLM_PLUGINS": "none"}
# The plugin's runs pin the reference first: they compare tokens with vanilla vLLM and check which
# impl ran, and must hold whichever vendor backend is installed and available on the machine
# (a run of a vendor's impl overrides VLLM_FL_PREFER).
PLUGIN_ON = {"VLLM_PLUGINS": PLUGIN_NAME, "VLLM_FL_PLATFORM": "cpu", "VLLM_FL_PREFER": "reference"}
#: in-tree layers of the tiny Llama the plugin replaces -> their op
REPLACED = {
    "RMSNorm": "rms_norm",
    "SiluAndMul": "silu_and_mul",
    "RotaryEmbedding": "rotary_embedding",
}


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


@dataclass
class VllmRun(ChildRun):
    """One vLLM subprocess (see ChildRun) and the environment it ran with."""

    env: dict[str, str] = field(default_factory=dict)


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


def _child_env(env: dict[str, str], workload: Workload) -> dict[str, str]:
    """`env` with what the child needs besides: this checkout's vllm_fl findable, installed or
    not (last on PYTHONPATH: what `env` puts there comes first), and, for a workload that
    watches the engine or runs a task (both use ``collective_rpc``), vLLM's permission to send a
    function to its engine process (pickled)."""
    env = _with_package(env)
    if workload.watch_engine or workload.task is not None:
        env["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"
    return env


def _with_package(env: dict[str, str]) -> dict[str, str]:
    """`env` with this checkout's vllm_fl findable by the child, installed or not (last on
    PYTHONPATH: what `env` puts there comes first)."""
    path = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(PACKAGE_ROOT) not in path:
        path.append(str(PACKAGE_ROOT))
    return {**env, "PYTHONPATH": os.pathsep.join(path)}


def engine_argv(model: str | Path, workload: Workload) -> list[str]:
    """The command line of an engine child for `workload` on `model`."""
    return [*ENGINE, "--model", str(model), *workload.argv()]


def launch(
    model: str | Path,
    workload: Workload,
    env: dict[str, str],
    *,
    timeout: float,
    cwd: str | Path | None = None,
) -> VllmRun:
    """Run `workload` on `model` as in a fresh interpreter with the environment `env` (and what
    `_child_env` adds): forked from a fork server that imported vLLM under that environment,
    where one can stand in (`vllm_fl.testing.zygotes`). Raises subprocess.TimeoutExpired when it
    outlives `timeout` seconds."""
    done = zygotes.run_child(
        engine_argv(model, workload), _child_env(env, workload), timeout=timeout, cwd=cwd
    )
    return VllmRun(done.result, done.output, done.wall_s, done.returncode, done.forked, env=env)


def start_resident(
    name: str, model: str | Path, workload: Workload, env: dict[str, str], log: Path
) -> ResidentChild:
    """An engine child that builds `workload`'s engine once, answers ``{"ready": ...}``, then a
    timed batch per ``batch SEED`` command (see `engine.serve`); its output goes to `log`."""
    argv = [*engine_argv(model, workload), "--serve"]
    return ResidentChild(name, argv, _child_env(env, workload), log)


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
    task: str | None = None,
    task_options: dict | None = None,
    append_path: str | None = None,
    quantization: str | None = None,
    llm_args: dict | None = None,
) -> VllmRun:
    """Run the tiny model's text prompts in a fresh interpreter with `env` on top of a clean
    environment (no inherited VLLM_* variables; offline; 1 GiB of KV cache; one process unless
    `env` says). float32 suits the CPU; a GPU needs bfloat16 or float16 (vLLM's FlashAttention
    refuses float32). `task` replaces the generation (see `Workload.task`, which gets
    `task_options`); `append_path` is searched after the installed distributions
    (`Workload.append_path`); `quantization` is vLLM's argument of that name (``"fp8"``: a
    16-bit checkpoint quantised while loading); `llm_args` adds keyword arguments of `vllm.LLM`
    (``attention_backend="TRITON_ATTN"``, ...). Raises
    AssertionError with the run's output when vLLM fails."""
    full_env = vllm_env({"VLLM_ENABLE_V1_MULTIPROCESSING": "0", **env})
    llm_args = {**SMALL_MODEL_ARGS, "dtype": dtype, **(llm_args or {})}
    if quantization is not None:
        llm_args["quantization"] = quantization
    workload = Workload(
        mode=mode,
        max_tokens=max_tokens,
        num_prompts=num_prompts,
        llm_args=llm_args,
        watch_engine=watch_engine,
        task=task,
        task_options=dict(task_options or {}),
        append_path=append_path,
    )
    run = launch(model, workload, full_env, timeout=timeout, cwd=Path(model).parent)
    if not run.ok:
        tail = "\n".join(run.tail(80))
        raise AssertionError(f"vLLM run failed (rc={run.returncode}, env={env}):\n{tail}")
    run.env = env
    return run

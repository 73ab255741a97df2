"""The benchmarks' engine runner: a vLLM engine for a model and a policy, in a fresh process.

A configuration is a named policy: the environment variables that set it (`CONFIGS`; ``--env``
adds more to every configuration). A model is a full-size shape with dummy weights (a config.json
of `vllm_fl.testing.models.MODELS`, optionally quantized) or a tiny model built locally (CPU).
`run_engine` starts `vllm_fl.testing.engine` with both and returns its report, tokens and timings
(a failed or timed-out run is a result, not an exception); `resident_engine` keeps one up that
generates a batch per command. The dispatch's "Op ... using ..." log lines say what ran where the
model ran in vLLM's engine process, apart from the runner.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from benchmarks.cli import refuse_unknown, write_json
from vllm_fl.testing.child import ResidentChild
from vllm_fl.testing.engine import SMALL_MODEL_ARGS, Workload
from vllm_fl.testing.launch import launch, start_resident, vllm_env
from vllm_fl.testing.models import MODELS, QUANTIZATIONS, TINY_MODELS, write_dummy_checkpoint

CONFIGS = {
    "vanilla": {"VLLM_PLUGINS": "none"},
    "plugin": {},
    # the plugin's CPU host mode: real vLLM's CPU build running the dispatch
    "plugin-cpu": {"VLLM_PLUGINS": "fl", "VLLM_FL_PLATFORM": "cpu"},
    "prefer=flagos": {"VLLM_FL_PREFER": "flagos"},
    # What a chip without vendor kernels runs: FlagGems, else the reference; the plugin's
    # attention backend on vLLM's Triton attention kernel instead of FlashAttention.
    "flagos-deny-cuda": {"VLLM_FL_PREFER": "flagos", "VLLM_FL_DENY_VENDORS": "cuda"},
    "prefer=reference": {"VLLM_FL_PREFER": "reference"},
    # FlagGems for every op but the MoE experts (vLLM's fused_moe): what the experts cost.
    "flagos-vendor-experts": {
        "VLLM_FL_PREFER": "flagos",
        "VLLM_FL_FLAGOS_BLACKLIST": "fused_experts",
    },
    # The shipped policy but with vLLM's CUDA kernels (opaque custom ops) under torch.compile too.
    "compile_prefer=vendor": {"VLLM_FL_COMPILE_PREFER": "vendor"},
    # The shipped policy but attention on the plugin's backend (vllm_fl.attention), its ops on
    # flagos (vLLM's Triton attention, FlagGems' cache write) or on cuda (FlashAttention, vLLM's
    # cache write): what the backend and each kernel cost against vLLM's FlashAttention backend.
    "attention=flagos": {
        "VLLM_FL_PER_OP": "attention_backend=flagos;reshape_and_cache_flash=flagos;"
        "paged_attention=flagos"
    },
    "attention=plugin-cuda": {
        "VLLM_FL_PER_OP": "attention_backend=flagos;reshape_and_cache_flash=vendor;"
        "paged_attention=vendor"
    },
}
MODES = ("eager", "compile")
#: every model a benchmark runs: full-size shapes (dummy weights) and tiny models (built here)
SHAPES = (*MODELS, *TINY_MODELS)
IN_PROCESS = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def env_pair(text: str) -> tuple[str, str]:
    """argparse type: "NAME=VALUE" -> (NAME, VALUE)."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    return name, value


def add_engine_arguments(parser: argparse.ArgumentParser, *, shape: str, input_len: int) -> None:
    """The model, its batch, the policy's extra variables and the mode of an engine run."""
    parser.add_argument("--shape", choices=SHAPES, default=shape)
    parser.add_argument("--layers", type=int, help="decoder layers (default: the shape's)")
    parser.add_argument(
        "--quant", choices=sorted(QUANTIZATIONS), help="a quantized checkpoint of this format"
    )
    parser.add_argument("--prompts", type=int, default=256)
    parser.add_argument("--input-len", type=int, default=input_len)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument(
        "--env",
        type=env_pair,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a variable set for every configuration (a policy: VLLM_FL_PREFER=flagos, ...)",
    )
    parser.add_argument(
        "--dummy-range",
        type=float,
        help="dummy weights in [-R, R] (vLLM's 1e-3 makes a full-size model's logits uniform) "
        "and integer ones seeded, in every process of the engine",
    )
    parser.add_argument("--timeout", type=int, default=400, help="seconds per engine")
    parser.add_argument("--log-dir", type=Path, default=Path("benchmarks/results/logs"))


def check_engine_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse what a tiny model cannot be run with."""
    if args.shape in TINY_MODELS and (args.layers or args.quant):
        parser.error(f"--shape {args.shape} is a tiny model: --layers and --quant do not apply")


def config_env(name: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a vLLM process running configuration ``name``: this one, the
    configuration's variables and ``extra`` on top; unless set, offline, FlashInfer's sampler off
    and 1 GiB of KV cache on a CPU."""
    env = {**os.environ, **CONFIGS[name], **(extra or {})}
    for key, value in vllm_env({}).items():
        env.setdefault(key, value)
    env.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
    return env


def check_configs(parser: argparse.ArgumentParser, configs: list[str]) -> None:
    refuse_unknown(parser, "--configs", configs, CONFIGS)


@dataclass(frozen=True)
class Model:
    """A model directory to run, and how vLLM loads it."""

    path: Path
    tiny: bool

    def llm_args(self, input_len: int, output_len: int) -> dict:
        """vllm.LLM's keyword arguments: a tiny model in float32 with its tokenizer; a shape
        with dummy weights in bf16, no tokenizer, room for one prompt of `input_len` and
        `output_len` tokens."""
        if self.tiny:
            return dict(SMALL_MODEL_ARGS)
        return {
            "load_format": "dummy",
            "skip_tokenizer_init": True,
            "dtype": "bfloat16",
            "max_model_len": input_len + output_len,
            "gpu_memory_utilization": 0.85,
        }


def prepare_model(shape: str, layers: int | None = None, quant: str | None = None) -> Model:
    """The model of ``--shape``: a tiny model built in a temporary directory, or a shape's
    config.json there (dummy weights), as a checkpoint of format `quant` if given."""
    folder = Path(tempfile.mkdtemp(prefix=f"{shape}-"))
    if shape in TINY_MODELS:
        return Model(TINY_MODELS[shape](folder / "model"), tiny=True)
    return Model(write_dummy_checkpoint(folder, shape, layers, quant), tiny=False)


def workload(model: Model, mode: str, args, **fields) -> Workload:
    """The run of `args`' batch on `model`: text prompts for a tiny model, random token-id
    prompts of ``--input-len`` otherwise; `fields` set the rest of the Workload."""
    defaults = {
        "mode": mode,
        "max_tokens": args.output_len,
        "num_prompts": args.prompts,
        "prompt_len": None if model.tiny else args.input_len,
        "llm_args": model.llm_args(args.input_len, args.output_len),
        "dummy_range": getattr(args, "dummy_range", None),
    }
    return Workload(**{**defaults, **fields})


def run_engine(
    name: str, model: Model, work: Workload, env: dict[str, str], timeout: float, log: Path
) -> dict:
    """One engine run of configuration `name`: its report, or ``{"error": ...}`` (a run that
    fails or outlives `timeout` is a result of a sweep, not its end); the output goes to
    `log`."""
    try:
        run = launch(model.path, work, env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s", "wall_s": timeout}
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(run.output)
    if not run.ok:
        return {"error": " | ".join(run.tail(5))[-400:], "wall_s": round(run.wall_s, 1)}
    result = {"wall_s": round(run.wall_s, 1), **run.result}
    lines = dispatch_lines(run.output)
    if not result.get("used_impls") and lines:
        # The model ran in vLLM's engine process: its dispatch log says what it selected.
        result["used_impls"] = impls_from_log(lines, traced=False)
        if work.mode == "compile":
            result["used_impls_traced"] = {
                **result["used_impls"],
                **impls_from_log(lines, traced=True),
            }
    result["dispatch_log"] = lines
    result["spawn_forced"] = "must use the spawn" in run.output
    return result


def run_configs(
    kind: str,
    model: Model,
    work: Workload,
    args: argparse.Namespace,
    report: Callable[[dict], None],
    in_process: bool = True,
) -> list[dict]:
    """`work` on `model` for each configuration of ``args.configs`` in turn (``args.env`` on
    top; one process unless `in_process` is false, as a profiler needs), each result reported
    as it comes and the results so far written to ``args.json`` where given (a sweep cut short
    keeps them)."""
    results = []
    extra = {**dict(args.env), **(IN_PROCESS if in_process else {})}
    for name in args.configs:
        log = log_path(args.log_dir, kind, name, work.mode)
        run = run_engine(name, model, work, config_env(name, extra), args.timeout, log)
        results.append({"config": name, **run})
        report(results[-1])
        if args.json:
            write_json(args.json, results)
    return results


def resident_engine(
    name: str, model: Model, work: Workload, env: dict[str, str], log: Path
) -> ResidentChild:
    """An engine of configuration `name` kept up, generating a batch per ``batch SEED``."""
    return start_resident(name, model.path, work, env, log)


def run_in_parallel(
    runs: list,
    one: Callable[[Hashable], dict],
    parallel: int,
    failed: Callable[[dict], bool],
    retry: Callable[[Hashable, dict], bool] = lambda run, results: True,
    on_result: Callable[[Hashable, dict], None] = lambda run, result: None,
) -> dict:
    """``one(run)`` for every run, ``parallel`` at once, each result given to `on_result` as it
    comes. Engines starting together on one GPU can trip over each other where one alone does
    not, so a run whose result is `failed` beside others is tried once more alone where
    ``retry(run, results)`` allows, its result then holding the first as ``retried``."""
    results: dict = {}
    with ThreadPoolExecutor(max_workers=max(parallel, 1)) as pool:
        futures = {pool.submit(one, run): run for run in runs}
        for future in as_completed(futures):
            run = futures[future]
            results[run] = future.result()
            on_result(run, results[run])
    if parallel > 1:
        for run in runs:
            if failed(results[run]) and retry(run, results):
                results[run] = {**one(run), "retried": results[run]}
                on_result(run, results[run])
    return {run: results[run] for run in runs}


def log_path(log_dir: Path, *parts: object) -> Path:
    """A run's log file: its parts joined, ``=`` made safe for file names."""
    return Path(log_dir) / ("_".join(str(p) for p in parts).replace("=", "_") + ".log")


def dispatch_lines(output: str) -> list[str]:
    """The dispatch's "Op '<op>' using ..." and fallback lines of a run's output."""
    return [
        line.split("] ", 1)[-1]
        for line in output.splitlines()
        if "Op '" in line and ("using" in line or "fallback" in line)
    ]


def impls_from_log(lines: list[str], traced: bool) -> dict[str, str]:
    """op -> impl id from the dispatch's "Op '<op>' using '<impl>'" lines (the last one wins),
    those for calls traced by torch.compile ("... under torch.compile") or the others."""
    found: dict[str, str] = {}
    for line in lines:
        match = re.search(r"Op '([^']+)' using '([^']+)'( under torch.compile)?", line)
        if match and bool(match.group(3)) == traced:
            found[match.group(1)] = match.group(2)
    return dict(sorted(found.items()))

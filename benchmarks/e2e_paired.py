"""End-to-end A/B design ``paired``: two engines resident at once, taking turns batch by batch.

Engines started one after another see a host whose speed wanders by more than two configurations
differ (`host_probe.py`). Here both engines are started first, each with its own share of GPU memory
(``--memory``), in vLLM's default process layout (each a `vllm.LLM` in its own process, with its
engine core in a process of its own: `vllm_fl.testing.engine --serve`), each warmed up with one
untimed batch of each kind, and then generate the same batches in turns, A B B A A B ..., so that
every pair of batches is seconds apart. Each pair gives a ratio of the second configuration to the
first (output tok/s of the batch, and tok/s of a decode-heavy batch of the same prompts cut to
``--decode-input-len`` tokens); the table reports the medians of both configurations, the median of
the paired ratios and its bootstrap 95% interval, and compares the greedy tokens. Runs of one setup
merge (``--summarize`` of several files). The default batch keeps every sequence's KV cache resident
in an engine holding the default memory share of an 80 GB GPU.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from benchmarks.cli import read_json, write_json
from benchmarks.engines import (
    Model,
    config_env,
    dispatch_lines,
    impls_from_log,
    log_path,
    resident_engine,
    workload,
)
from benchmarks.tables import Column, text_table
from benchmarks.timing import bootstrap_median_ci, median
from vllm_fl.testing.child import ChildError, ResidentChild


def turn_order(names: list[str], pair: int) -> list[str]:
    """Who goes first in pair ``pair``: A B, then B A, and so on (A B B A A B ...), so that a
    drift of the host's speed during a run favours neither."""
    return list(names) if pair % 2 == 0 else list(reversed(names))


def throughputs(answer: dict) -> dict:
    """A batch's answer as output tok/s (and decode tok/s where the batch had a decode part)."""
    figures = {"output_tok_s": round(answer["output_tokens"] / answer["generate_s"], 1)}
    if "decode_s" in answer:
        figures["decode_tok_s"] = round(answer["decode_tokens"] / answer["decode_s"], 1)
    return figures


def summarize(result: dict) -> list[dict]:
    """Per configuration: the median tok/s over the pairs; for the second one also the median
    of its paired ratios to the first and their bootstrap 95% intervals."""
    base, other = result["configs"]
    rows = []
    for name in (base, other):
        row = {"config": name, "pairs": len(result["pairs"])}
        for key in ("output_tok_s", "decode_tok_s"):
            values = [pair[name][key] for pair in result["pairs"] if key in pair[name]]
            row[key] = round(median(values), 1) if values else None
        rows.append(row)
    for key in ("output_tok_s", "decode_tok_s"):
        ratios = [
            pair[other][key] / pair[base][key]
            for pair in result["pairs"]
            if key in pair[base] and key in pair[other]
        ]
        if ratios:
            low, high = bootstrap_median_ci(ratios)
            rows[1][f"{key}_ratio"] = round(median(ratios), 3)
            rows[1][f"{key}_interval"] = (round(low, 3), round(high, 3))
    return rows


def format_table(result: dict) -> str:
    """The rows of `summarize` as a terminal table, and whether the greedy tokens agreed."""

    def ratio(row: dict, key: str) -> str | None:
        if f"{key}_ratio" not in row:
            return None
        low, high = row[f"{key}_interval"]
        return f"{row[f'{key}_ratio']:.3f}x ({low:.3f}-{high:.3f})"

    columns = [
        Column("config", align="<"),
        Column("pairs"),
        Column("output tok/s", ".1f"),
        Column("output ratio (95%)"),
        Column("decode tok/s", ".1f"),
        Column("decode ratio (95%)"),
    ]
    cells = [
        [
            row["config"],
            row["pairs"],
            row["output_tok_s"],
            ratio(row, "output_tok_s"),
            row["decode_tok_s"],
            ratio(row, "decode_tok_s"),
        ]
        for row in summarize(result)
    ]
    base, other = result["configs"]
    same = "identical" if result["tokens_identical"] else "DIFFERENT"
    distinct = [pair["distinct_tokens"] for pair in result["pairs"] if "distinct_tokens" in pair]
    spread = f" ({min(distinct)}+ distinct token ids per batch)" if distinct else ""
    lines = [
        text_table(columns, cells),
        f"greedy tokens of {other} ({result['mode']}): {same} to {base}'s{spread}",
    ]
    differing = [
        i for i, pair in enumerate(result["pairs"]) if pair.get("tokens_identical") is False
    ]
    if differing:
        lines.append(
            f"    different in pairs {', '.join(map(str, differing))} of {len(result['pairs'])}"
        )
    for name in result["configs"]:
        repeats = [pair["repeated"][name] for pair in result["pairs"] if "repeated" in pair]
        if repeats:
            verdict = (
                "the same"
                if all(repeats)
                else f"CHANGED in {repeats.count(False)} of {len(repeats)} repeats"
            )
            lines.append(f"{name}'s greedy tokens for prompts it had generated before: {verdict}")
    lines += [
        f"engine setting {key}: {base} {values[base]}, {other} {values[other]}"
        for key, values in differing_settings(result).items()
    ]
    return "\n".join(lines)


def differing_settings(result: dict) -> dict[str, dict[str, str]]:
    """The engine settings (`vllm_fl.testing.engine.engine_settings`) in which the two engines
    differ, ``{setting: {config: value}}``; empty for results from before settings were kept."""
    settings = result.get("settings") or {}
    if len(settings) < 2:
        return {}
    base, other = (settings.get(name, {}) for name in result["configs"])
    return {
        key: {result["configs"][0]: base.get(key), result["configs"][1]: other.get(key)}
        for key in sorted(base.keys() | other.keys())
        if base.get(key) != other.get(key)
    }


def merge(results: list[dict]) -> dict:
    """Runs of the same two configurations, mode and workload as one result with all their
    pairs (greedy tokens identical only where they were in every run)."""
    first = results[0]
    for other in results[1:]:
        for key in ("configs", "mode", "shape", "layers", "quant", "workload"):
            if other.get(key) != first.get(key):
                raise ValueError(
                    f"runs differ in {key}: {first.get(key)!r} and {other.get(key)!r}; only runs "
                    "of the same configurations, mode, model and workload merge"
                )
    return {
        **first,
        "pairs": [pair for result in results for pair in result["pairs"]],
        "tokens_identical": all(result["tokens_identical"] for result in results),
    }


def run_pairs(
    engines: dict[str, ResidentChild], pairs: int, timeout: float, seeds: int | None = None
) -> tuple[list, bool]:
    """``pairs`` pairs of batches in `turn_order`; the figures per pair and whether every
    batch's greedy tokens agreed between the engines.

    Pair ``p`` generates the prompts of seed ``p % seeds`` (default: new prompts every pair).
    Where a seed comes again, each engine's tokens are also compared with its own from that
    seed's first pair (``repeated``). On a repeat vLLM's prefix cache holds the prompts, so the
    prefill runs other shapes: an engine whose tokens then change has greedy tokens that hang on
    rounding, and a difference between two engines says nothing about their kernels."""
    names = list(engines)
    results, identical = [], True
    first_tokens: dict[int, dict[str, list]] = {}
    for pair in range(pairs):
        seed = pair % (seeds or pairs)
        answers = {
            name: engines[name].ask(f"batch {seed}", timeout) for name in turn_order(names, pair)
        }
        same = answers[names[0]]["tokens"] == answers[names[1]]["tokens"]
        identical &= same
        row = {"first": turn_order(names, pair)[0], "seed": seed, "tokens_identical": same}
        if seed in first_tokens:
            row["repeated"] = {
                name: answers[name]["tokens"] == first_tokens[seed][name] for name in names
            }
        else:
            first_tokens[seed] = {name: answers[name]["tokens"] for name in names}
        # dummy weights that give every token the same logit make any two kernels agree
        row["distinct_tokens"] = len({t for seq in answers[names[0]]["tokens"] for t in seq})
        row.update({name: throughputs(answer) for name, answer in answers.items()})
        results.append(row)
        print(json.dumps(row), flush=True)
    return results, identical


def run_design(model: Model, args) -> dict | None:
    """The two configurations of ``args.configs`` as resident engines taking ``args.pairs``
    turns; the result, written to ``args.json``; None where an engine failed."""
    work = workload(
        model,
        args.mode,
        args,
        decode_prompt_len=None if model.tiny else args.decode_input_len,
        llm_args={
            **model.llm_args(args.input_len, args.output_len),
            **({} if model.tiny else {"gpu_memory_utilization": args.memory}),
        },
    )
    engines: dict[str, ResidentChild] = {}
    result = {
        "configs": args.configs,
        "mode": args.mode,
        "shape": args.shape,
        # the layer count and format as run (absent in results from before they were kept)
        "layers": args.layers,
        "quant": args.quant,
        "startup": {},
    }
    result["workload"] = {
        "prompts": args.prompts,
        "input_len": args.input_len,
        "output_len": args.output_len,
        "decode_input_len": args.decode_input_len,
        "gpu_memory_utilization": args.memory,
    }
    try:
        for name in args.configs:  # one at a time: each measures the memory the other left
            log = log_path(args.log_dir, "paired", name, args.mode)
            env = config_env(name, dict(args.env))
            engines[name] = resident_engine(name, model, work, env, log)
            ready = engines[name].answer(args.timeout)
            result["startup"][name] = round(ready["import_s"] + ready["init_s"], 1)
            if "settings" in ready:
                result.setdefault("settings", {})[name] = ready["settings"]
        result["pairs"], result["tokens_identical"] = run_pairs(
            engines, args.pairs, args.timeout, args.prompt_seeds
        )
    except ChildError as error:
        print(f"error: {error}", file=sys.stderr)
        return None
    finally:
        records = {name: engine.close(args.timeout) for name, engine in engines.items()}
    result["dispatch"] = {}
    for name, engine in engines.items():
        # the model ran in the engine core's process: its dispatch log says what it selected
        used = (records[name] or {}).get("used_impls") or impls_from_log(
            dispatch_lines(engine.log.read_text(errors="replace")), traced=False
        )
        if used:
            result["dispatch"][name] = used
    write_json(args.json, result)
    print(format_table(result))
    for name, used in result["dispatch"].items():
        print(f"{name}: {used}")
    return result


def summarize_files(paths: list[Path]) -> None:
    """Print the table of earlier runs of one setup, their pairs merged (ValueError where the
    setups differ)."""
    print(format_table(merge([read_json(path) for path in paths])))

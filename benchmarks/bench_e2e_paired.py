"""Two vLLM engines resident on one GPU, taking turns batch by batch: the end-to-end comparison
that the host's drifting speed cannot tilt.

Engines started one after another see a host whose speed wanders by more than two
configurations differ (`host_probe.py`: fresh processes one after another timing
``torch.empty`` at 2.5 µs and at 5 µs). Here both engines are started first, each with its own
share of GPU memory, in vLLM's default process layout (each a `vllm.LLM` in its own process,
with its engine core in a process of its own: `vllm_runner.py --serve-fd`), and then generate
the same batches in turns, A B B A A B ..., so that every pair of batches is seconds apart. Each pair gives a ratio of the second
configuration to the first (output tok/s of the batch, and tok/s of a decode-heavy batch of the
same prompts cut to 16 tokens); the table reports the medians of both configurations, the median
of the paired ratios and its bootstrap 95% interval, and compares the greedy tokens::

    python benchmarks/bench_e2e_paired.py --configs vanilla,prefer=flagos --pairs 8 \\
        --json benchmarks/results/h100_e2e_paired.json
    python benchmarks/bench_e2e_paired.py --summarize run1.json [run2.json ...]  # pairs merged

The model is the shape's (`shapes.py`) with dummy weights in bf16, as in `bench_e2e.py`; the
default batch, 256 prompts of 384 tokens and 128 out, keeps every sequence's KV cache resident
in an engine holding 45% of an 80 GB GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

from bench_e2e import (
    CONFIGS,
    MODES,
    add_model_arguments,
    config_env,
    dispatch_lines,
    dummy_model_args,
    impls_from_log,
    shape_model_dir,
)
from harness import (
    Column,
    bootstrap_median_ci,
    median,
    name_list,
    read_json,
    refuse_unknown,
    text_table,
    write_json,
)
from vllm_harness import RUNNER
from vllm_runner import SERVE_PREFIX, Workload


class EngineError(RuntimeError):
    """An engine that exited, or did not answer in time; the message ends with its log's tail."""


class Engine:
    """One runner process serving batches (``vllm_runner.serve``), its output in ``log``."""

    def __init__(self, name: str, model_dir: str, workload: Workload, env: dict, log: Path):
        self.name, self.log = name, log
        read_end, write_end = os.pipe()
        log.parent.mkdir(parents=True, exist_ok=True)
        self._output = log.open("w")
        cmd = [sys.executable, str(RUNNER), "--model", model_dir, *workload.argv()]
        self.proc = subprocess.Popen(
            [*cmd, "--serve-fd", str(write_end)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=self._output,
            stderr=subprocess.STDOUT,
            text=True,
            pass_fds=(write_end,),
        )
        os.close(write_end)
        self._replies = os.fdopen(read_end, "r")

    def answer(self, timeout: float) -> dict:
        """The engine's next answer; EngineError where it exits or takes over ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self._replies], [], [], 1.0)
            if ready:
                line = self._replies.readline()
                if line.startswith(SERVE_PREFIX):
                    return json.loads(line[len(SERVE_PREFIX) :])
                if not line:  # every writer closed: the runner is gone
                    break
            elif self.proc.poll() is not None:
                break
        raise EngineError(f"{self.name}: no answer (exit status {self.proc.poll()})\n{self.tail()}")

    def batch(self, seed: int, timeout: float) -> dict:
        self.proc.stdin.write(f"batch {seed}\n")
        self.proc.stdin.flush()
        return self.answer(timeout)

    def close(self, timeout: float) -> dict | None:
        """Ask the engine to quit; its last answer (the dispatch record), None where it failed."""
        try:
            if self.proc.poll() is None:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
            return self.answer(timeout)
        except (EngineError, OSError):
            return None
        finally:
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self._replies.close()
            self._output.close()

    def tail(self, lines: int = 15) -> str:
        self._output.flush()
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


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
    return (
        text_table(columns, cells)
        + f"\ngreedy tokens of {other} ({result['mode']}): {same} to {base}'s"
    )


def merge(results: list[dict]) -> dict:
    """Runs of the same two configurations, mode and workload as one result with all their
    pairs (greedy tokens identical only where they were in every run)."""
    first = results[0]
    for other in results[1:]:
        for key in ("configs", "mode", "shape", "workload"):
            if other.get(key) != first.get(key):
                raise ValueError(
                    f"runs differ in {key}: {first.get(key)!r} and {other.get(key)!r}; only runs "
                    "of the same configurations, mode, shape and workload merge"
                )
    return {
        **first,
        "pairs": [pair for result in results for pair in result["pairs"]],
        "tokens_identical": all(result["tokens_identical"] for result in results),
    }


def run_pairs(engines: dict[str, Engine], pairs: int, timeout: float) -> tuple[list, bool]:
    """``pairs`` pairs of batches in `turn_order`; the figures per pair and whether every
    batch's greedy tokens agreed between the engines."""
    names = list(engines)
    results, identical = [], True
    for pair in range(pairs):
        answers = {name: engines[name].batch(pair, timeout) for name in turn_order(names, pair)}
        identical &= answers[names[0]]["tokens"] == answers[names[1]]["tokens"]
        row = {"first": turn_order(names, pair)[0]}
        row.update({name: throughputs(answer) for name, answer in answers.items()})
        results.append(row)
        print(json.dumps(row), flush=True)
    return results, identical


def workload(args) -> Workload:
    llm_args = dummy_model_args(args.input_len, args.output_len)
    llm_args["gpu_memory_utilization"] = args.memory
    return Workload(
        mode=args.mode,
        max_tokens=args.output_len,
        num_prompts=args.prompts,
        prompt_len=args.input_len,
        decode_prompt_len=args.decode_input_len,
        llm_args=llm_args,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=name_list, default="vanilla,prefer=flagos")
    parser.add_argument("--mode", default="eager", choices=MODES)
    parser.add_argument("--pairs", type=int, default=8)
    add_model_arguments(parser, input_len=384)
    parser.add_argument(
        "--memory", type=float, default=0.45, help="each engine's gpu_memory_utilization"
    )
    parser.add_argument("--timeout", type=int, default=300, help="seconds per engine answer")
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/e2e_paired.json"))
    parser.add_argument("--log-dir", default="benchmarks/results/logs")
    parser.add_argument(
        "--summarize",
        nargs="+",
        type=Path,
        metavar="JSON",
        help="print the table of earlier runs (several runs of one setup are merged)",
    )
    args = parser.parse_args(argv)
    if args.summarize:
        try:
            print(format_table(merge([read_json(path) for path in args.summarize])))
        except ValueError as error:
            parser.error(str(error))
        return 0
    refuse_unknown(parser, "--configs", args.configs, CONFIGS)
    if len(args.configs) != 2 or len(set(args.configs)) != 2:
        parser.error(f"--configs needs two different configurations, got {args.configs}")
    if args.pairs < 1:
        parser.error(f"--pairs is {args.pairs}; allowed: 1 or more")

    model_dir = shape_model_dir(args.shape, args.layers, args.quant)
    engines: dict[str, Engine] = {}
    result = {"configs": args.configs, "mode": args.mode, "shape": args.shape, "startup": {}}
    result["workload"] = {
        "prompts": args.prompts,
        "input_len": args.input_len,
        "output_len": args.output_len,
        "decode_input_len": args.decode_input_len,
        "gpu_memory_utilization": args.memory,
    }
    try:
        for name in args.configs:  # one at a time: each measures the memory the other left
            log = Path(args.log_dir) / f"paired_{name.replace('=', '_')}_{args.mode}.log"
            engines[name] = Engine(name, model_dir, workload(args), config_env(name), log)
            ready = engines[name].answer(args.timeout)
            result["startup"][name] = round(ready["import_s"] + ready["init_s"], 1)
        result["pairs"], result["tokens_identical"] = run_pairs(engines, args.pairs, args.timeout)
    except EngineError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
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
    return 0


if __name__ == "__main__":
    sys.exit(main())

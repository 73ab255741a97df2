"""End-to-end serving throughput of real vLLM, configuration against configuration.

One script, four A/B designs (``--design``), all on one model (``--shape``: a full-size shape
with dummy weights, optionally ``--quant``ized and with fewer ``--layers``, or a tiny model built
here, which runs on vLLM's CPU build) and one batch (``--prompts`` x ``--input-len`` in,
``--output-len`` out, greedy):

- ``rounds`` (`e2e_rounds`): a fresh engine per configuration, mode and round, the rounds
  interleaved; medians over the rounds, greedy tokens compared with vanilla vLLM's;
- ``paired`` (`e2e_paired`): two engines resident at once, taking turns batch by batch; the
  median of the paired ratios with its bootstrap interval;
- ``policy-rounds`` / ``policy-steps`` (`e2e_policies`): one engine per configuration, the
  dispatch's policy switched inside it between batches or between engine steps.

A configuration is a named policy (`engines.CONFIGS`: vanilla, plugin, prefer=flagos,
flagos-deny-cuda, ...); ``--env NAME=VALUE`` sets a variable for every configuration. The mode is
eager (``enforce_eager``) or compile (vLLM's torch.compile and CUDA graphs).

    python -m benchmarks.e2e --design rounds --configs vanilla,prefer=flagos --modes eager \\
        --repeat 3 --json e2e.json
    python -m benchmarks.e2e --design paired --configs vanilla,prefer=flagos --pairs 8
    python -m benchmarks.e2e --design policy-steps --configs plugin --batches 16 --output-len 64
    python -m benchmarks.e2e --shape tiny-llama --configs vanilla,plugin-cpu --modes eager,compile
    python -m benchmarks.e2e --design rounds --summarize e2e.json [more.json ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks import e2e_paired, e2e_policies, e2e_rounds
from benchmarks.cli import name_list, refuse_unknown
from benchmarks.engines import (
    MODES,
    add_engine_arguments,
    check_configs,
    check_engine_arguments,
    prepare_model,
    run_configs,
    workload,
)

DESIGNS = ("rounds", "paired", "policy-rounds", "policy-steps")
#: where each design's results go unless --json says
DEFAULT_JSON = {
    "rounds": "benchmarks/results/e2e.json",
    "paired": "benchmarks/results/e2e_paired.json",
    "policy-rounds": "benchmarks/results/e2e_policy_rounds.json",
    "policy-steps": "benchmarks/results/e2e_policy_steps.json",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--design", choices=DESIGNS, default="rounds")
    parser.add_argument(
        "--configs",
        type=name_list,
        help="configurations (rounds: default vanilla,plugin,prefer=flagos,prefer=reference; "
        "paired: two, default vanilla,prefer=flagos; policy-*: default plugin)",
    )
    parser.add_argument("--modes", type=name_list, default=list(MODES), help="rounds: the modes")
    parser.add_argument("--mode", choices=MODES, default="eager", help="the other designs' mode")
    add_engine_arguments(parser, shape="llama3-8b", input_len=512)
    parser.add_argument("--decode-input-len", type=int, default=16)
    parser.add_argument("--json", type=Path, help="where the results go (default by design)")
    parser.add_argument(
        "--summarize",
        nargs="+",
        type=Path,
        metavar="JSON",
        help="rounds, paired: print the table of earlier results (several files merged)",
    )
    rounds = parser.add_argument_group("rounds")
    rounds.add_argument("--repeat", type=int, default=3, help="interleaved rounds per config")
    rounds.add_argument(
        "--timed-repeats",
        type=int,
        default=1,
        help="batches timed per engine (each with prompts of its own); the fastest counts",
    )
    rounds.add_argument(
        "--in-process",
        action="store_true",
        help="VLLM_ENABLE_V1_MULTIPROCESSING=0 (default: vLLM's own process layout)",
    )
    rounds.add_argument(
        "--watch-engine",
        action="store_true",
        help="report the engine process's garbage-collector pauses and allocator retries",
    )
    paired = parser.add_argument_group("paired")
    paired.add_argument("--pairs", type=int, default=8)
    paired.add_argument(
        "--prompt-seeds",
        type=int,
        help="pair p generates the prompts of seed p %% N, so that each engine's tokens for the "
        "same prompts are compared with its own (default: new prompts every pair)",
    )
    paired.add_argument(
        "--memory", type=float, default=0.45, help="each engine's gpu_memory_utilization"
    )
    policies = parser.add_argument_group("policy-rounds, policy-steps")
    policies.add_argument(
        "--policies",
        type=name_list,
        help=f"these of {', '.join(e2e_policies.AB_POLICIES)} (prefer=vendor among them)",
    )
    policies.add_argument("--rounds", type=int, default=3, help="policy-rounds: rounds")
    policies.add_argument(
        "--checks",
        action="store_true",
        help="policy-rounds: count FlagGems entry calls, plan misses and CUDA syncs per policy",
    )
    policies.add_argument("--batches", type=int, default=10, help="policy-steps: batches")
    return parser


def check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse what the design cannot run, naming the flag and what is allowed."""
    if args.configs is None:
        args.configs = {
            "rounds": ["vanilla", "plugin", "prefer=flagos", "prefer=reference"],
            "paired": ["vanilla", "prefer=flagos"],
        }.get(args.design, ["plugin"])
    check_configs(parser, args.configs)
    refuse_unknown(parser, "--modes", args.modes, MODES)
    check_engine_arguments(parser, args)
    if args.design == "paired":
        if len(args.configs) != 2 or len(set(args.configs)) != 2:
            parser.error(f"--configs needs two different configurations, got {args.configs}")
        if args.pairs < 1:
            parser.error(f"--pairs is {args.pairs}; allowed: 1 or more")
        if args.prompt_seeds is not None and args.prompt_seeds < 1:
            parser.error(f"--prompt-seeds is {args.prompt_seeds}; allowed: 1 or more")
    if args.policies is not None:
        wrong = [p for p in args.policies if p not in e2e_policies.AB_POLICIES]
        if wrong or "prefer=vendor" not in args.policies:
            parser.error(
                f"--policies: {', '.join(wrong) or 'prefer=vendor missing'}; allowed: "
                f"{', '.join(e2e_policies.AB_POLICIES)}, prefer=vendor among them"
            )
    if args.summarize and args.design not in ("rounds", "paired"):
        parser.error(f"--summarize: the {args.design} design has no summary of earlier results")
    args.json = args.json or Path(DEFAULT_JSON[args.design])


def run_policies(model, args) -> list[dict]:
    """``policy-rounds`` or ``policy-steps``: each configuration's engine compares the policies;
    the results, written to ``args.json`` as they come."""
    steps = args.design == "policy-steps"
    task = e2e_policies.STEPS_TASK if steps else e2e_policies.ROUNDS_TASK
    options = {"policies": args.policies, "rounds": args.rounds, "checks": args.checks}
    options["batches"] = args.batches
    work = workload(model, args.mode, args, task=task, task_options=options)
    return run_configs(args.design, model, work, args, e2e_policies.print_report)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check(parser, args)
    if args.summarize:
        try:
            design = e2e_rounds if args.design == "rounds" else e2e_paired
            design.summarize_files(args.summarize)
        except ValueError as error:
            parser.error(str(error))
        return 0
    model = prepare_model(args.shape, args.layers, args.quant)
    if args.design == "rounds":
        e2e_rounds.run_design(model, args)
    elif args.design == "paired":
        return 0 if e2e_paired.run_design(model, args) is not None else 1
    else:
        run_policies(model, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

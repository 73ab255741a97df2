"""Which of vLLM's own kernels still run under the plugin, per configuration (torch profiler).

For each configuration (a policy: ``--configs``, ``--env``) it starts an engine in one process on
the model of ``--shape`` (any full-size shape with dummy weights, ``--quant``ized and with
``--layers`` decoder layers, or a tiny model built here), generates a batch under
``torch.profiler`` and counts the operator events of vLLM's compiled libraries and custom ops,
the MoE kernels apart, and on a GPU every CUDA kernel by origin (ATen, cuBLAS, Triton, or
compiled C++ such as vLLM's ``_C`` kernels, DeepGEMM, CUTLASS, FlashAttention;
`vllm_fl.testing.census`). Every configuration's greedy tokens are compared with the first
one's: identical sequences, tokens agreeing, the largest log-probability difference over the
first tokens.

    python -m benchmarks.census --shape qwen3-moe --configs vanilla,flagos-deny-cuda
    python -m benchmarks.census --shape llama3-8b --layers 4 --quant fp8-block \\
        --configs flagos-deny-cuda --json census.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.cli import name_list, write_json
from benchmarks.engines import (
    MODES,
    add_engine_arguments,
    check_configs,
    check_engine_arguments,
    prepare_model,
    run_configs,
    workload,
)
from vllm_fl.testing.census import ORIGINS, TASK, compare_outputs


def print_report(result: dict) -> None:
    if "error" in result:
        print(f"{result['config']}: error: {result['error']}")
        return
    print(f"{result['config']}: {result['moe_kernel_calls']} calls of vLLM's MoE kernels")
    for kind in ("moe", "other"):
        for name, count in sorted(result[kind].items(), key=lambda item: -item[1]):
            print(f"    {kind:<6}{count:>8}  {name}")
    kernels = result.get("kernels")
    if kernels is not None:
        print(
            "    CUDA kernels by origin: "
            + ", ".join(
                f"{o} {sum(kernels[o].values())} calls of {len(kernels[o])}" for o in ORIGINS
            )
        )
        for name, count in sorted(kernels["compiled"].items(), key=lambda item: -item[1]):
            print(f"    compiled{count:>8}  {name[:140]}")
    print(f"    used impls: {json.dumps(result.get('used_impls', {}))}")


def compare_with_first(results: list[dict]) -> None:
    """Each configuration's tokens against the first one's, printed and kept in its result."""
    first = results[0]
    if "sequences" not in first:
        return
    for result in results[1:]:
        if "sequences" not in result:
            continue
        result["against"] = {
            "config": first["config"],
            **compare_outputs(first["sequences"], result["sequences"]),
        }
        c = result["against"]
        print(
            f"{result['config']} against {first['config']}: {c['identical']}/{c['sequences']} "
            f"sequences identical, {c['tokens_agreeing']}/{c['tokens']} tokens before the first "
            f"difference; largest logprob difference over the first tokens "
            f"{c['max_logprob_diff']:.4g}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--configs",
        type=name_list,
        default="vanilla,plugin",
        help="the first is what the others' tokens are compared with",
    )
    parser.add_argument("--mode", choices=MODES, default="eager")
    add_engine_arguments(parser, shape="qwen3-moe", input_len=64)
    parser.set_defaults(layers=None, prompts=8, output_len=8)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    check_configs(parser, args.configs)
    check_engine_arguments(parser, args)
    model = prepare_model(args.shape, args.layers, args.quant)
    results = run_configs(
        "census", model, workload(model, args.mode, args, task=TASK), args, print_report
    )
    compare_with_first(results)
    if args.json:
        write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())

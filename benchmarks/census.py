"""Which of vLLM's own kernels still run under the plugin, per configuration (torch profiler).

For each configuration (a policy: ``--configs``, ``--env``) it starts an engine in one process on
the model of ``--shape`` (any full-size shape with dummy weights, ``--quant``ized and with
``--layers`` decoder layers, or a tiny model built here), generates a batch under
``torch.profiler`` and counts the operator events of vLLM's compiled libraries and custom ops,
the MoE kernels apart (`vllm_fl.testing.census`):

    python -m benchmarks.census --shape qwen3-moe --configs vanilla,flagos-deny-cuda
    python -m benchmarks.census --shape llama3-8b --layers 4 --quant fp8-block \\
        --configs flagos-deny-cuda --json census.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.cli import name_list
from benchmarks.engines import (
    MODES,
    add_engine_arguments,
    check_configs,
    check_engine_arguments,
    prepare_model,
    run_configs,
    workload,
)
from vllm_fl.testing.census import TASK


def print_report(result: dict) -> None:
    if "error" in result:
        print(f"{result['config']}: error: {result['error']}")
        return
    print(f"{result['config']}: {result['moe_kernel_calls']} calls of vLLM's MoE kernels")
    for kind in ("moe", "other"):
        for name, count in sorted(result[kind].items(), key=lambda item: -item[1]):
            print(f"    {kind:<6}{count:>8}  {name}")
    print(f"    used impls: {json.dumps(result.get('used_impls', {}))}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=name_list, default="vanilla,plugin")
    parser.add_argument("--mode", choices=MODES, default="eager")
    add_engine_arguments(parser, shape="qwen3-moe", input_len=64)
    parser.set_defaults(layers=None, prompts=8, output_len=8)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    check_configs(parser, args.configs)
    check_engine_arguments(parser, args)
    model = prepare_model(args.shape, args.layers, args.quant)
    run_configs("census", model, workload(model, args.mode, args, task=TASK), args, print_report)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Tune the flagos fused experts' GEMM configs for a model of ``vllm_fl.testing.models`` on this GPU.

``--shape`` names a model with experts (default qwen3-moe); its experts' sizes go to the kernel
library's tuner, ``python -m vllm_fl.kernels.moe.tune``, with every other argument (``--write``
writes the library's table; ``python -m vllm_fl.kernels.moe.tune --help`` lists them). Given
the four sizes (``--experts --intermediate --hidden --top-k``), a model not there is
tuned instead.

    python -m benchmarks.tune_moe [--shape qwen3-moe] [--dtype bfloat16] [--tokens 1,2,...]
        [--workers N] [--write] [--json F]
"""

from __future__ import annotations

import argparse
import sys

from vllm_fl.kernels.moe import tune
from vllm_fl.testing.models import MODELS, ModelShape

MOE_SHAPES = [name for name, config in MODELS.items() if "num_experts" in config]
SIZE_FLAGS = tuple(f"--{name.replace('_', '-')}" for name in tune.SIZES)


def shape_arguments(name: str) -> list[str]:
    """The tuner's arguments for the experts of the model ``name`` of ``vllm_fl.testing.models``."""
    model = ModelShape.from_config(name, MODELS[name])
    sizes = (model.experts, model.moe_intermediate, model.hidden, model.top_k)
    given = [part for flag, size in zip(SIZE_FLAGS, sizes) for part in (flag, str(size))]
    return [*given, "--label", name]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="qwen3-moe", choices=MOE_SHAPES)
    args, rest = parser.parse_known_args(argv)
    by_sizes = any(part.split("=")[0] in SIZE_FLAGS for part in rest)
    return tune.main(rest if by_sizes else [*shape_arguments(args.shape), *rest])


if __name__ == "__main__":
    sys.exit(main())

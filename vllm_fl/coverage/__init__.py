"""``vllm-fl coverage MODEL``: what of a model runs on the plugin's dispatch, per policy.

The model's structure is built without weights (`model.build_model`: vLLM's class for the
architecture, on the meta device, under the plugin's platform), its layers are counted per vLLM
class (`census.census`), each reached through the plugin or left to vLLM, and for the ones left
to vLLM the code vLLM runs there is classified as a compiled kernel, Triton or PyTorch
(`vllm_code.classify`); `report` evaluates each policy through the dispatch's public
`explain_ops` and prints the table (or JSON).
"""

from __future__ import annotations

from .model import BuiltModel, CoverageError, build_model
from .report import NAMED_POLICIES, Coverage, Policy, parse_policy

__all__ = [
    "BuiltModel",
    "Coverage",
    "CoverageError",
    "NAMED_POLICIES",
    "Policy",
    "build_model",
    "coverage",
    "parse_policy",
]


def coverage(model: str, policies: list[Policy]) -> Coverage:
    """Build ``model``'s structure and report it under ``policies`` (the first one is the one the
    layers are built under: the configuration in force)."""
    from .census import census
    from .report import verdicts

    built = build_model(model)
    layers = census(built.model)
    return Coverage(
        model=str(model),
        architecture=built.architecture,
        platform=built.platform,
        policies=policies,
        layers=layers,
        verdicts=verdicts(layers, policies),
    )

"""Per policy, which of a model's layers the plugin dispatches and to which impl: the coverage
report, as a table and as JSON.

A policy is a set of ``VLLM_FL_*`` variables laid over the environment and read by the dispatch's
own loader (`vllm_fl.dispatch.load_config`), so it means exactly what those variables mean in a
served process: ``shipped`` is the configuration in force (environment, ``VLLM_FL_CONFIG``, the
platform YAML), ``flagos`` adds ``VLLM_FL_PREFER=flagos``, ``portable`` adds
``VLLM_FL_PREFER=flagos VLLM_FL_DENY_VENDORS=cuda`` (nothing of vLLM's CUDA kernels). For each
op a dispatched layer runs, the report gives the impl the policy selects on this machine
(``here``) and the one it selects where every backend can run (``anywhere``: availability
ignored, the policy's exclusions kept), from `vllm_fl.dispatch.explain_ops`.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, field
from typing import Any, Mapping

from .census import (
    ATTENTION,
    DISABLED,
    DISPATCHED,
    GEMM,
    KERNEL,
    REPLACED,
    ROUTER,
    SUBCLASS,
    VLLM,
    Layer,
)

#: the policies reported unless ``--policy`` says otherwise: name -> variables over the environment
NAMED_POLICIES: dict[str, dict[str, str]] = {
    "shipped": {},
    "flagos": {"VLLM_FL_PREFER": "flagos"},
    "portable": {"VLLM_FL_PREFER": "flagos", "VLLM_FL_DENY_VENDORS": "cuda"},
}

#: what the table says for a layer the policy leaves to vLLM
LEFT = "vLLM"


@dataclass(frozen=True)
class Policy:
    """A named policy: the variables it sets over the environment and the policy they make."""

    name: str
    env: Mapping[str, str]
    policy: Any  # vllm_fl.dispatch.SelectionPolicy


def parse_policy(spec: str) -> Policy:
    """``shipped``, ``flagos``, ``portable``, or ``VAR=VALUE [VAR=VALUE ...]`` (``VLLM_FL_*``
    variables, as in a shell). Raises ``ValueError`` for anything else and the dispatch's
    ``ConfigError`` for a value it refuses."""
    from vllm_fl.dispatch import load_config

    if spec in NAMED_POLICIES:
        env = NAMED_POLICIES[spec]
    else:
        env = {}
        for word in shlex.split(spec):
            var, sep, value = word.partition("=")
            if not sep or not var.startswith("VLLM_FL_"):
                raise ValueError(
                    f"policy {spec!r}: expected one of {', '.join(NAMED_POLICIES)} or "
                    "VLLM_FL_VAR=VALUE words"
                )
            env[var] = value
    return Policy(spec, dict(env), load_config({**os.environ, **env}).policy)


@dataclass(frozen=True)
class OpChoice:
    """An op's impl under a policy: here, and where every backend is available."""

    op: str
    here: str | None
    anywhere: str | None

    def __str__(self) -> str:
        here = self.here or "none"
        return here if self.anywhere in (None, self.here) else f"{here} / {self.anywhere}"


@dataclass
class Verdict:
    """One layer under one policy: ``dispatched`` or not, the ops with their impls, why not."""

    dispatched: bool
    ops: list[OpChoice] = field(default_factory=list)
    why: str = ""


def _choices(policy: Any) -> dict[str, OpChoice]:
    from vllm_fl.dispatch import explain_ops

    out: dict[str, OpChoice] = {}
    for info in explain_ops(policy=policy):
        unavailable = [impl for impl, why in info["rejected"] if str(why).startswith("unavailable")]
        anywhere = policy.order(info["op"], list(info["candidates"]) + unavailable)
        out[info["op"]] = OpChoice(
            info["op"], info["selected"], anywhere[0].impl_id if anywhere else None
        )
    return out


def verdicts(layers: list[Layer], policies: list[Policy]) -> list[dict[str, Verdict]]:
    """For each layer, policy name -> its `Verdict`."""
    from vllm_fl.registration import allowed_classes

    out: list[dict[str, Verdict]] = [{} for _ in layers]
    for pol in policies:
        choices = _choices(pol.policy)
        allowed = set(allowed_classes(pol.policy))
        for row, layer in zip(out, layers):
            ops = [choices.get(op, OpChoice(op, None, None)) for op in layer.ops]
            if layer.reach == REPLACED:
                if layer.in_tree in allowed:
                    row[pol.name] = Verdict(True, ops)
                else:
                    row[pol.name] = Verdict(False, why="the policy keeps vLLM's class")
            elif layer.reach in (ROUTER, GEMM):
                if all(pol.policy.oot_allowed(op, op) for op in layer.ops):
                    row[pol.name] = Verdict(True, ops)
                else:
                    row[pol.name] = Verdict(False, why="the policy keeps vLLM's function")
            elif layer.reach in (ATTENTION, KERNEL):
                row[pol.name] = Verdict(True, ops)
            else:
                row[pol.name] = Verdict(False, why=layer.note)
    return out


#: how the table names each reach
REACH_TEXT = {
    REPLACED: "dispatched",
    ATTENTION: "dispatched (backend)",
    ROUTER: "dispatched (function)",
    KERNEL: "dispatched (kernel)",
    GEMM: "dispatched (gemm)",
    SUBCLASS: "subclass, vLLM's code",
    DISABLED: "manifest op, not dispatched",
    VLLM: "left to vLLM",
}


@dataclass
class Coverage:
    """The report of one model: its layers and their verdicts under each policy."""

    model: str
    architecture: str
    platform: str
    policies: list[Policy]
    layers: list[Layer]
    verdicts: list[dict[str, Verdict]]

    def ops_used(self, policy: str | None = None) -> list[str]:
        """The ops the model's dispatched layers run under ``policy`` (default: the first)."""
        name = policy or self.policies[0].name
        ops = [
            choice.op
            for verdict in self.verdicts
            if verdict[name].dispatched
            for choice in verdict[name].ops
        ]
        return list(dict.fromkeys(ops))

    def to_json(self) -> dict[str, Any]:
        """The report as plain data (``--json``)."""
        return {
            "model": self.model,
            "architecture": self.architecture,
            "platform": self.platform,
            "policies": {p.name: dict(p.env) for p in self.policies},
            "ops_used": {p.name: self.ops_used(p.name) for p in self.policies},
            "layers": [
                {
                    "class": layer.qualname,
                    "name": layer.name,
                    "count": layer.count,
                    "example": layer.example,
                    "reach": layer.reach,
                    "replaces": layer.in_tree or None,
                    "ops": list(layer.ops),
                    "vllm_code": {
                        "kind": layer.vllm_code.kind,
                        "evidence": layer.vllm_code.evidence,
                    },
                    "note": layer.note,
                    "policies": {
                        name: {
                            "dispatched": v.dispatched,
                            "ops": [
                                {"op": c.op, "here": c.here, "anywhere": c.anywhere} for c in v.ops
                            ],
                            "why": v.why,
                        }
                        for name, v in verdict.items()
                    },
                }
                for layer, verdict in zip(self.layers, self.verdicts)
            ],
        }

    def table(self) -> str:
        """The plain-text table: a row per layer class (a line more per further op)."""
        names = [p.name for p in self.policies]
        head = ("layer", "n", "how", "op", *names, "vLLM's own code here")
        rows: list[tuple[str, ...]] = [head]
        for layer, verdict in zip(self.layers, self.verdicts):
            code = "-" if layer.reach in DISPATCHED else str(layer.vllm_code)
            lines = max(1, len(layer.ops))
            for i in range(lines):
                op = layer.ops[i] if i < len(layer.ops) else "-"
                cells = []
                for name in names:
                    v = verdict[name]
                    cells.append(str(v.ops[i]) if v.dispatched and i < len(v.ops) else LEFT)
                first = i == 0
                rows.append(
                    (
                        layer.name if first else "",
                        str(layer.count) if first else "",
                        REACH_TEXT[layer.reach] if first else "",
                        op,
                        *cells,
                        code if first else "",
                    )
                )
        widths = [max(len(r[i]) for r in rows) for i in range(len(head) - 1)]
        out = [" | ".join(f"{c:<{w}}" for c, w in zip(r, widths)) + f" | {r[-1]}" for r in rows]
        out.insert(1, "-+-".join("-" * w for w in widths) + "-+-" + "-" * 20)
        header = [
            f"model {self.model}: {self.architecture}, built on the plugin's {self.platform} "
            "platform (no weights)",
            "policies: "
            + "; ".join(
                f"{p.name} = {' '.join(f'{k}={v}' for k, v in p.env.items()) or 'as configured'}"
                for p in self.policies
            ),
            "a cell: the impl selected here / where every backend is available (one name when "
            f"both agree); {LEFT}: not dispatched",
            "",
        ]
        notes = [
            f"  {layer.name}: {layer.note}"
            for layer in self.layers
            if layer.note and layer.reach in (SUBCLASS, DISABLED)
        ]
        footer = ["", "notes:", *notes] if notes else []
        return "\n".join(header + out + footer) + "\n"


def write_json(coverage: Coverage, path: str) -> None:
    """Write ``coverage.to_json()`` to ``path``."""
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(coverage.to_json(), handle, indent=2)
        handle.write("\n")

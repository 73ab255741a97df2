"""``python -m vllm_fl.verify``: bring-up mode on a model, and bisection of the ops that change
its output.

    python -m vllm_fl.verify MODEL [--prompts P ...] [--max-tokens N] [--dtype D] [--json FILE]
    python -m vllm_fl.verify bisect MODEL [same options]

The first runs a short greedy generation with the current policy (the environment's
``VLLM_FL_*`` settings) and ``VLLM_FL_VERIFY`` on (unless it names ops), then prints the report
merged over the processes that ran the model; its exit status is 1 when a call exceeded its
tolerance. The second finds the ops whose selected impls change the greedy tokens against an
all-reference run of the same model and prompts, and prints them with the first position where
the tokens diverge. Both run vLLM in a child process (``vllm_fl.testing.launch``), eagerly.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from vllm_fl.dispatch import read_env

from .report import FILE_PREFIX, Report, format_report, merge

__all__ = ["VerifyRun", "run_verify", "run_bisect", "format_bisection", "main"]

TIMEOUT_S = 1800.0


@dataclass
class VerifyRun:
    """A verification run: the merged report, the greedy tokens with bring-up mode on and then
    paused, the seconds of both generations and the engine steps verified, the child's output."""

    report: Report
    tokens: list[list[int]]
    tokens_unverified: list[list[int]]
    verified_s: float
    unverified_s: float
    steps: int
    output: str

    def cost(self) -> str:
        """What verification cost, per engine step."""
        if not self.steps:
            return "verification cost: no engine step was verified"
        per_step = (self.verified_s - self.unverified_s) / self.steps * 1e3
        same = (
            "equal"
            if self.tokens == self.tokens_unverified
            else "differ (the engine may batch the requests of two generations differently, "
            "which changes the result of a kernel that depends on the batch)"
        )
        ratio = self.verified_s / self.unverified_s if self.unverified_s > 0 else float("inf")
        return (
            f"verification cost: {per_step:.1f} ms per engine step ({self.steps} steps: "
            f"{self.verified_s:.2f} s verified, {self.unverified_s:.2f} s unverified, "
            f"{ratio:.2f}x); tokens with verification paused: {same}"
        )


def _report_files(directory: Path) -> dict[Path, tuple[int, int]]:
    """The reports in ``directory``: path -> (modification time, size)."""
    return {
        p: (p.stat().st_mtime_ns, p.stat().st_size) for p in directory.glob(f"{FILE_PREFIX}*.json")
    }


def _workload(
    task: str,
    prompts,
    max_tokens: int,
    llm_args: Mapping[str, Any],
    prompt_len: int | None = None,
    num_prompts: int | None = None,
):
    from vllm_fl.testing.engine import Workload

    return Workload(
        mode="eager",
        max_tokens=max_tokens,
        prompt_len=prompt_len,
        num_prompts=num_prompts,
        # the same prompts are generated more than once: none may reuse another's KV cache
        llm_args={**llm_args, "enable_prefix_caching": False},
        task=f"vllm_fl.verify.tasks:{task}",
        task_options={"prompts": list(prompts) if prompts else None},
    )


def _launch(model, workload, env: Mapping[str, str], timeout: float):
    from vllm_fl.testing.launch import launch

    run = launch(model, workload, dict(env), timeout=timeout)
    if not run.ok:
        tail = "\n".join(run.tail(60))
        raise RuntimeError(f"vLLM run failed (exit status {run.returncode}):\n{tail}")
    return run


def run_verify(
    model: str | Path,
    env: Mapping[str, str] | None = None,
    *,
    prompts: list[str] | None = None,
    max_tokens: int = 16,
    llm_args: Mapping[str, Any] | None = None,
    prompt_len: int | None = None,
    num_prompts: int | None = None,
    timeout: float = TIMEOUT_S,
) -> VerifyRun:
    """Generate with ``env`` (default: this process's environment) and bring-up mode on;
    ``VLLM_FL_VERIFY`` keeps a list of ops it names (an invalid value is its ``ConfigError``,
    before vLLM starts), ``VLLM_FL_VERIFY_REPORT`` its directory."""
    env = dict(os.environ if env is None else env)
    if read_env("VLLM_FL_VERIFY", env) is False:  # unset or off; else on, or the ops it names
        env["VLLM_FL_VERIFY"] = "on"
    with tempfile.TemporaryDirectory(prefix="vllm-fl-verify-") as tmp:
        directory = Path(read_env("VLLM_FL_VERIFY_REPORT", env) or tmp)
        env["VLLM_FL_VERIFY_REPORT"] = str(directory)
        before = _report_files(directory)  # a directory of the user's may hold older reports
        workload = _workload(
            "generate", prompts, max_tokens, llm_args or {}, prompt_len, num_prompts
        )
        env["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"  # collective_rpc sends the task's functions
        run = _launch(model, workload, env, timeout)
        after = _report_files(directory)
        report = merge(
            json.loads(path.read_text())
            for path, stamp in sorted(after.items())
            if before.get(path) != stamp
        )
    r = run.result
    return VerifyRun(
        report,
        r["tokens"],
        r["tokens_unverified"],
        r["verified_s"],
        r["unverified_s"],
        r["steps"],
        run.output,
    )


def run_bisect(
    model: str | Path,
    env: Mapping[str, str] | None = None,
    *,
    prompts: list[str] | None = None,
    max_tokens: int = 16,
    llm_args: Mapping[str, Any] | None = None,
    prompt_len: int | None = None,
    num_prompts: int | None = None,
    timeout: float = TIMEOUT_S,
) -> dict[str, Any]:
    """The bisection (``vllm_fl.verify.tasks.bisect``) with ``env`` and bring-up mode off."""
    env = dict(os.environ if env is None else env)
    env["VLLM_FL_VERIFY"] = "off"
    env["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"  # collective_rpc sends the task's functions
    workload = _workload("bisect", prompts, max_tokens, llm_args or {}, prompt_len, num_prompts)
    return _launch(model, workload, env, timeout).result


def _verdict(result: Mapping[str, Any], op: str) -> str:
    """What bring-up mode said of ``op``'s calls in the policy's own generation."""
    verdict = result.get("verdicts", {}).get(op)
    if not verdict or not verdict["verified"]:
        return ""
    if verdict["over_tolerance"]:
        return f": {verdict['over_tolerance']} of {verdict['verified']} calls over tolerance"
    return (
        f": all {verdict['verified']} calls within tolerance (it rounds differently from the "
        "reference, which can flip a near-tie token; not a wrong kernel by the report)"
    )


def format_bisection(result: Mapping[str, Any]) -> str:
    used = result["used_impls"]
    lines = [
        "vllm_fl verify bisect: selected impls against an all-reference run "
        f"({result['generations']} generation(s))",
        "ops on another impl than the reference: "
        + (", ".join(f"{op}={used[op]}" for op in result["candidates"]) or "none"),
    ]
    divergence = result["divergence"]
    if divergence is None:
        lines.append("the greedy tokens equal the all-reference run's: no op changes them")
        return "\n".join(lines)
    prompt, pos = divergence
    lines.append(
        f"the greedy tokens diverge from the all-reference run at prompt {prompt}, " f"token {pos}"
    )
    for group in result["culprits"]:
        if len(group) == 1:
            op = group[0]
            where = result["culprit_divergence"].get(op)
            at = f" (alone: prompt {where[0]}, token {where[1]})" if where else ""
            lines.append(f"culprit: {op} ({used[op]}){at}{_verdict(result, op)}")
        else:
            lines.append(
                "culprits only together: " + ", ".join(f"{op} ({used[op]})" for op in group)
            )
    return "\n".join(lines)


def _parser(prog: str = "python -m vllm_fl.verify") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        usage="%(prog)s [bisect] MODEL [options]",
        description="Without 'bisect': a short greedy generation with bring-up mode on, then the "
        "report. With 'bisect': the ops whose selected impls change the greedy tokens against "
        "an all-reference run. See docs/verify.md.",
    )
    parser.add_argument(
        "model",
        help="model directory or name (as vllm.LLM takes it), or with --shape a model shape "
        "of vllm_fl.testing.models.MODELS (llama3-8b, qwen3-moe, deepseek-v3-2l) run on dummy "
        "weights",
    )
    parser.add_argument(
        "--shape", action="store_true", help="MODEL is a shape: dummy weights, token-id prompts"
    )
    parser.add_argument("--layers", type=int, default=None, help="with --shape: decoder layers")
    parser.add_argument(
        "--prompt-len", type=int, default=128, help="with --shape: tokens per random prompt"
    )
    parser.add_argument("--num-prompts", type=int, default=4, help="with --shape: prompts")
    parser.add_argument("--prompts", nargs="+", default=None, help="text prompts")
    parser.add_argument("--max-tokens", type=int, default=16, help="tokens generated per prompt")
    parser.add_argument("--dtype", default="auto", help="vllm.LLM's dtype (default: auto)")
    parser.add_argument("--max-model-len", type=int, default=1024)
    parser.add_argument(
        "--llm-args", type=json.loads, default={}, help="more vllm.LLM keyword arguments, JSON"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")
    parser.add_argument("--rows", type=int, default=40, help="rows of the report printed")
    return parser


def main(argv: list[str] | None = None, prog: str = "python -m vllm_fl.verify") -> int:
    """``python -m vllm_fl.verify [bisect] MODEL ...`` (also ``vllm-fl verify``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    bisecting = bool(argv) and argv[0] == "bisect"
    args = _parser(prog).parse_args(argv[1:] if bisecting else argv)
    if args.max_tokens < 1:
        print(f"--max-tokens={args.max_tokens}: expected 1 or more", file=sys.stderr)
        return 2
    llm_args = {"dtype": args.dtype, "max_model_len": args.max_model_len, **args.llm_args}
    options: dict[str, Any] = dict(
        prompts=args.prompts, max_tokens=args.max_tokens, llm_args=llm_args
    )
    model = args.model
    with tempfile.TemporaryDirectory(prefix="vllm-fl-verify-model-") as tmp:
        if args.shape:
            from vllm_fl.testing.models import MODELS, write_dummy_checkpoint

            if model not in MODELS:
                print(
                    f"--shape: unknown model shape {model!r}; allowed: {', '.join(MODELS)}",
                    file=sys.stderr,
                )
                return 2
            model = str(write_dummy_checkpoint(Path(tmp) / model, model, args.layers))
            llm_args.update(load_format="dummy", skip_tokenizer_init=True)
            options.update(prompt_len=args.prompt_len, num_prompts=args.num_prompts)
        return _run(bisecting, model, options, args)


def _run(bisecting: bool, model: str, options: dict[str, Any], args) -> int:
    try:
        if bisecting:
            result = run_bisect(model, **options)
            print(format_bisection(result))
            data: Any = result
            status = 0
        else:
            run = run_verify(model, **options)
            print(format_report(run.report, args.rows))
            print(run.cost())
            data = {
                "tokens": run.tokens,
                "tokens_unverified": run.tokens_unverified,
                "verified_s": run.verified_s,
                "unverified_s": run.unverified_s,
                "steps": run.steps,
                **run.report.to_json(),
            }
            status = 1 if run.report.exceeded else 0
    except RuntimeError as exc:
        print(f"vllm_fl verify: {exc}", file=sys.stderr)
        return 2
    if args.json is not None:
        args.json.write_text(json.dumps(data, indent=1))
    return status

"""``vllm-fl coverage MODEL [--policy P ...] [--json FILE]``."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from . import NAMED_POLICIES, CoverageError, coverage, parse_policy


def main(argv: list[str] | None = None, prog: str = "vllm-fl coverage") -> int:
    """Print the coverage table of MODEL; 0 when it was built, 2 with one line on stderr when
    the model or an option cannot be used."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Which of a model's layers the plugin dispatches, to which impl, per policy, "
        "and what vLLM's own code runs for the others. MODEL: a checkpoint directory, a "
        "directory holding config.json, or a Hugging Face config file. The structure is built "
        "on the meta device (no weights) under the plugin's platform.",
    )
    parser.add_argument("model", metavar="MODEL")
    parser.add_argument(
        "--policy",
        action="append",
        metavar="P",
        help=f"a policy to report: {', '.join(NAMED_POLICIES)} or 'VLLM_FL_VAR=VALUE ...' over "
        "the environment; repeatable (default: all three named ones)",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON to FILE")
    parser.add_argument(
        "--verbose", action="store_true", help="keep vLLM's and the plugin's INFO logs"
    )
    args = parser.parse_args(argv)
    if not args.verbose:
        # vLLM and the plugin log their configuration at INFO; the report is the output here
        logging.disable(logging.INFO)
    try:
        if not os.path.exists(args.model):  # before importing vLLM: a typo fails at once
            raise CoverageError(f"{args.model}: no such file or directory")
        policies = [parse_policy(spec) for spec in (args.policy or list(NAMED_POLICIES))]
        report = coverage(args.model, policies)
    except (CoverageError, ValueError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - the dispatch's ConfigError and vLLM's own
        from vllm_fl.dispatch import ConfigError

        if not isinstance(exc, ConfigError):
            raise
        print(f"{prog}: invalid dispatch configuration: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(report.table())
    if args.json:
        from .report import write_json

        write_json(report, args.json)
    return 0

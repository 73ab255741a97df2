"""``python -m vllm_fl.dispatch explain [--table]`` and ``python -m vllm_fl.dispatch docs
[--check]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .signatures import ImplSignatureError
from .types import ConfigError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vllm_fl.dispatch")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "explain",
        help="per op: candidates in order with availability, the selection, and policy sources",
    )
    p.add_argument("--table", action="store_true", help="compact op | selected | candidates table")
    p = sub.add_parser(
        "docs",
        help="write docs/configuration.md and the README's settings table from the settings table",
    )
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    p.add_argument("--root", type=Path, default=Path.cwd(), help="the repository (default: .)")
    args = parser.parse_args(argv)
    if args.command == "docs":
        return _docs(args.root, args.check)
    return _explain(args.table)


def explain_command(argv: list[str], prog: str = "vllm-fl explain") -> int:
    """``vllm-fl explain [--table]``."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Per op: candidates in order with availability, the selection, where each "
        "impl came from and the policy's sources.",
    )
    parser.add_argument(
        "--table", action="store_true", help="compact op | selected | candidates table"
    )
    return _explain(parser.parse_args(argv).table)


def _explain(table: bool) -> int:
    from .explain import explain, explain_table

    try:
        text = explain_table() if table else explain()
    except ConfigError as exc:
        print(f"error: invalid dispatch configuration: {exc}", file=sys.stderr)
        return 2
    except ImplSignatureError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


def _docs(root: Path, check: bool) -> int:
    from .config import docs

    if check:
        stale = docs.stale(root)
        for path in stale:
            print(f"stale: {path}; run `python -m vllm_fl.dispatch docs`", file=sys.stderr)
        return 1 if stale else 0
    for path in docs.write(root):
        print(f"  updated  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

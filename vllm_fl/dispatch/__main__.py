"""``python -m vllm_fl.dispatch explain [--table]``."""

from __future__ import annotations

import argparse
import sys

from .types import ConfigError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vllm_fl.dispatch")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "explain",
        help="per op: candidates in order with availability, the selection, and policy sources",
    )
    p.add_argument("--table", action="store_true", help="compact op | selected | candidates table")
    args = parser.parse_args(argv)
    from .explain import explain, explain_table

    try:
        text = explain_table() if args.table else explain()
    except ConfigError as exc:
        print(f"error: invalid dispatch configuration: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

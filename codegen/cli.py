"""Command line: ``python -m codegen [--check] [vendor NAME --ops OP,...] [--manifest PATH]
[--root PATH]``."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from codegen.errors import CodegenError
from codegen.generate import build, read_manifest
from codegen.orphans import find_orphans

FIX = "make codegen"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m codegen",
        description="Regenerate vllm_fl's boilerplate from ops.yaml.",
    )
    parser.add_argument(
        "command",
        nargs="*",
        metavar="vendor NAME",
        help="scaffold a new vendor backend NAME for the ops given with --ops, add it to ops.yaml",
    )
    parser.add_argument(
        "--ops",
        default=None,
        metavar="OP[,OP...]",
        help="with vendor: the ops the new vendor implements (make: OPS=...)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="render in memory; fail with a diff if any file is stale",
    )
    parser.add_argument(
        "--root",
        type=Path,
        default=Path.cwd(),
        help="repository root (default: the current directory)",
    )
    parser.add_argument(
        "--manifest", type=Path, default=None, help="the manifest (default: ROOT/ops.yaml)"
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="print only the summary")
    args = parser.parse_args(argv)
    root: Path = args.root
    manifest_path: Path = args.manifest or root / "ops.yaml"
    vendor = None
    if args.command:
        if args.command[0] != "vendor" or len(args.command) > 2:
            parser.error("the only command is `vendor NAME --ops OP[,OP...]`")
        if args.check:
            parser.error("--check does not combine with vendor")
        vendor = args.command[1] if len(args.command) == 2 else ""
    elif args.ops is not None:
        parser.error("--ops goes with `vendor NAME`")

    start = time.perf_counter()
    unused_impls: list = []
    try:
        if vendor is not None:
            from codegen.vendor import VendorUsage, scaffold_vendor

            try:
                files = scaffold_vendor(vendor, args.ops, manifest_path, root)
            except VendorUsage as usage:
                print(f"{usage}\nnothing was written", file=sys.stderr)
                return 2
        else:
            manifest = read_manifest(manifest_path, root)
            files = build(manifest, root)
            unused_impls = find_orphans(manifest, root)
        changes = files.plan()
        orphans = files.orphans()
        if not args.check:
            files.write(changes)
    except CodegenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        print("nothing was written", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # a generator bug: say so in one line, as for any other error
        print(
            f"error: internal generator error {type(exc).__name__}: {exc}; report it with the "
            "manifest (set CODEGEN_TRACEBACK=1 for the traceback)",
            file=sys.stderr,
        )
        if os.environ.get("CODEGEN_TRACEBACK") == "1":
            raise
        return 2
    elapsed = time.perf_counter() - start
    for unused in unused_impls:
        print(f"warning: {unused}", file=sys.stderr)

    total = len(files)
    if args.check:
        if changes or orphans:
            for change in changes:
                sys.stdout.write(change.diff())
            problems = []
            if changes:
                problems.append(
                    f"{len(changes)} of {total} generated files are stale "
                    f"({', '.join(c.path for c in changes)})"
                )
            if orphans:
                problems.append(
                    f"{len(orphans)} temporary file(s) of an interrupted run are left "
                    f"({', '.join(orphans)})"
                )
            print(
                f"codegen --check: {'; '.join(problems)}; run `{FIX}` "
                f"(python -m codegen) and commit the result ({elapsed:.2f} s)"
            )
            return 1
        print(f"codegen --check: all {total} generated files are up to date ({elapsed:.2f} s)")
        return 0
    if not args.quiet:
        for change in changes:
            print(f"  {change.verb:8} {change.path}")
        for orphan in orphans:
            print(f"  removed  {orphan} (left by an interrupted run)")
    what = f"vendor {vendor!r} scaffolded; " if vendor else ""
    print(
        f"codegen: {what}{len(changes)} file(s) changed, {total - len(changes)} unchanged "
        f"({elapsed:.2f} s)"
    )
    return 0

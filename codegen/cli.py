"""Command line of the generator.

``vllm-fl generate [--check] [--root DIR]`` and ``vllm-fl vendor NAME --ops OP,... [--out DIR]``
(``vllm_fl.cli``) call :func:`generate` and :func:`vendor`; ``python -m codegen [--check]
[vendor NAME --ops OP,...]`` in the repository calls :func:`main`, which takes both forms.

The root is the tree being generated: the plugin's checkout (its ``ops.yaml``) or an out-of-tree
vendor package (its ``vendor.yaml``, see ``codegen.package``). Without ``--root`` it is the
nearest folder at or above the current one holding either manifest, else the checkout this
generator belongs to.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from . import package
from .errors import CodegenError
from .files import FileManager
from .generate import build, read_manifest
from .orphans import find_orphans
from .resources import CHECKOUT
from .vendor import VendorUsage, scaffold_vendor

FIX = "make codegen"  # (vllm-fl generate)
#: what regenerates an out-of-tree vendor package
PACKAGE_FIX = "vllm-fl generate"


def main(argv: list[str] | None = None) -> int:
    """``python -m codegen``: ``vendor NAME ...`` scaffolds, anything else regenerates."""
    argv = sys.argv[1:] if argv is None else list(argv)
    index = 0
    while index < len(argv):  # the first word that is no option nor an option's value
        if argv[index] in ("--root", "--manifest", "--ops", "--out"):
            index += 2
        elif argv[index].startswith("-"):
            index += 1
        else:
            break
    if index < len(argv) and argv[index] == "vendor":
        return vendor(argv[:index] + argv[index + 1 :], prog="python -m codegen vendor")
    return generate(argv, prog="python -m codegen")


def find_root(start: Path) -> Path:
    """The nearest folder at or above ``start`` holding ``ops.yaml`` or a vendor manifest, else
    the checkout this generator runs from (never an installed plugin)."""
    for folder in (start, *start.parents):
        if (folder / "ops.yaml").is_file() or (folder / package.MANIFEST).is_file():
            return folder
    if CHECKOUT is None:
        raise CodegenError(
            str(start),
            None,
            f"neither this folder nor one above it holds ops.yaml or {package.MANIFEST}",
            "the plugin's checkout or a vendor package (vllm-fl vendor NAME --ops ... --out DIR "
            "makes one), or --root",
        )
    return CHECKOUT


def _root_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--root",
        type=Path,
        default=None,
        help="the tree to generate: the plugin's checkout or a vendor package (default: the "
        f"nearest folder at or above the current one with ops.yaml or {package.MANIFEST})",
    )


def generate(argv: list[str] | None = None, prog: str = "vllm-fl generate") -> int:
    """Regenerate (or, with ``--check``, verify) the tree at ``--root``."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Regenerate vllm_fl's boilerplate from ops.yaml, or an out-of-tree vendor "
        f"package's from its {package.MANIFEST} and the plugin's ops.yaml.",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="render in memory; fail with a diff if any file is stale",
    )
    _root_argument(parser)
    parser.add_argument(
        "--manifest", type=Path, default=None, help="the manifest (default: ROOT/ops.yaml)"
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="print only the summary")
    args = parser.parse_args(argv)
    try:
        root: Path = args.root or find_root(Path.cwd())
    except CodegenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    out_of_tree = args.manifest is None and package.is_package(root)

    def run() -> tuple[FileManager, list]:
        if out_of_tree:
            return package.build_package(root), []
        manifest = read_manifest(args.manifest or root / "ops.yaml", root)
        return build(manifest, root), find_orphans(manifest, root)

    fix = PACKAGE_FIX if out_of_tree else FIX
    return _run(run, args.check, args.quiet, fix, what="")


def vendor(argv: list[str] | None = None, prog: str = "vllm-fl vendor") -> int:
    """Scaffold vendor NAME for some ops: in the plugin's ops.yaml, or with ``--out`` as a
    package of its own."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Scaffold vendor backend NAME for the ops given with --ops: in the plugin's "
        "ops.yaml (adding ops to a vendor that exists), or with --out as a pip package of its own.",
    )
    parser.add_argument("name", nargs="?", default="", metavar="[new] NAME", help="the vendor name")
    parser.add_argument(
        "--ops",
        default=None,
        metavar="OP[,OP...]",
        help="the ops the vendor implements (make: OPS=...)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="scaffold a standalone package into DIR (an empty or new folder; run again on it "
        "to add ops)",
    )
    _root_argument(parser)
    parser.add_argument(
        "--manifest", type=Path, default=None, help="the manifest (default: ROOT/ops.yaml)"
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="print only the summary")
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) >= 2 and argv[0] == "new" and not argv[1].startswith("-"):
        argv = argv[1:]  # ``vllm-fl vendor new NAME``: the same command
    args = parser.parse_args(argv)

    def run() -> tuple[FileManager, list]:
        if args.out is not None:
            return package.scaffold_package(args.name, args.ops, args.out), []
        root = args.root or find_root(Path.cwd())
        if args.manifest is None and package.is_package(root):  # inside a vendor package
            return package.scaffold_package(args.name, args.ops, root), []
        return scaffold_vendor(args.name, args.ops, args.manifest or root / "ops.yaml", root), []

    try:
        return _run(run, False, args.quiet, FIX, what=f"vendor {args.name!r} scaffolded; ")
    except VendorUsage as usage:
        print(f"{usage}\nnothing was written", file=sys.stderr)
        return 2


def _run(run, check: bool, quiet: bool, fix: str, what: str) -> int:
    """Render with ``run()``, then write or (``check``) compare; report in one block."""
    start = time.perf_counter()
    try:
        files, unused_impls = run()
        changes = files.plan()
        orphans = files.orphans()
        if not check:
            files.write(changes)
    except CodegenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        print("nothing was written", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except VendorUsage:  # the command's own answer, printed by ``vendor``
        raise
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
    if check:
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
                f"codegen --check: {'; '.join(problems)}; run `{fix}` and commit the result "
                f"({elapsed:.2f} s)"
            )
            return 1
        print(f"codegen --check: all {total} generated files are up to date ({elapsed:.2f} s)")
        return 0
    if not quiet:
        for change in changes:
            print(f"  {change.verb:8} {change.path}")
        for orphan in orphans:
            print(f"  removed  {orphan} (left by an interrupted run)")
    print(
        f"codegen: {what}{len(changes)} file(s) changed, {total - len(changes)} unchanged "
        f"({elapsed:.2f} s)"
    )
    return 0

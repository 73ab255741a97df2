"""``vllm-fl``: the plugin's command line (a console script of the wheel).

Each subcommand is one row of ``COMMANDS``: its name, a one-line help and the function that runs
it, named as ``module:function`` and imported only when chosen (so ``vllm-fl explain`` never
imports the generator). The function takes the remaining arguments and its ``prog`` and returns
the exit status.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass

#: the generator: shipped inside the wheel as ``vllm_fl._codegen``; in a checkout that is not
#: installed, the repository's top-level ``codegen``
GENERATOR_PACKAGES = ("vllm_fl._codegen", "codegen")
#: what the generator imports beyond the plugin's dependencies (the extra ``codegen``)
GENERATOR_DEPENDENCIES = ("jinja2", "black")


@dataclass(frozen=True)
class Command:
    help: str
    target: str  # "module:function"; a module starting with "." is one of the generator's


COMMANDS: dict[str, Command] = {
    "generate": Command(
        "regenerate from ops.yaml (or a vendor package's vendor.yaml); --check fails on stale "
        "files",
        ".cli:generate",
    ),
    "vendor": Command(
        "scaffold vendor NAME for some ops, in the plugin or (--out DIR) as a package of its own",
        ".cli:vendor",
    ),
    "explain": Command(
        "per op: candidates, availability, the selection and where each impl came from; --table",
        "vllm_fl.dispatch.__main__:explain_command",
    ),
    "verify": Command(
        "bring-up mode: a short generation with every kernel checked against the reference; "
        "verify bisect MODEL: the ops that change the greedy tokens",
        "vllm_fl.verify.cli:main",
    ),
    "coverage": Command(
        "coverage MODEL: per layer of the model, dispatched (to which impl, per policy) or left "
        "to vLLM (compiled kernel, Triton or PyTorch); --json FILE",
        "vllm_fl.coverage.cli:main",
    ),
}


#: other names of a command (``vllm-fl codegen`` is ``vllm-fl generate``)
ALIASES = {"codegen": "generate"}


def _generator_module(name: str):
    for package in GENERATOR_PACKAGES:
        try:
            return importlib.import_module(package + name)
        except ModuleNotFoundError as exc:
            if exc.name not in (package, package + name):
                raise
    raise ModuleNotFoundError(f"the generator ({' or '.join(GENERATOR_PACKAGES)}) is not installed")


def _load(target: str):
    module_name, _, function = target.partition(":")
    if module_name.startswith("."):
        module = _generator_module(module_name)
    else:
        module = importlib.import_module(module_name)
    return getattr(module, function)


def usage() -> str:
    width = max(len(name) for name in COMMANDS)
    rows = "\n".join(f"  {name:{width}}  {cmd.help}" for name, cmd in COMMANDS.items())
    return f"usage: vllm-fl COMMAND [ARGS...]   (vllm-fl COMMAND --help)\n\ncommands:\n{rows}\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(usage())
        return 0 if argv else 2
    name, rest = ALIASES.get(argv[0], argv[0]), argv[1:]
    command = COMMANDS.get(name)
    if command is None:
        sys.stderr.write(
            f"vllm-fl: unknown command {name!r}, expected one of {', '.join(COMMANDS)}\n"
        )
        return 2
    try:
        run = _load(command.target)
    except ModuleNotFoundError as exc:
        if exc.name not in GENERATOR_DEPENDENCIES:
            raise
        sys.stderr.write(
            f"vllm-fl {name}: the generator needs {exc.name}: "
            "pip install 'vllm-plugin-fl[codegen]'\n"
        )
        return 2
    return run(rest, prog=f"vllm-fl {name}")


if __name__ == "__main__":
    sys.exit(main())

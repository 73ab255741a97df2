"""Check hand-written impl functions against their op signatures (with ``ast``, importing nothing)
and scaffold the missing ones as stubs.

Existing code is never modified: a missing function is appended to its module (created if
missing) as a stub raising NotImplementedError; a function whose parameters differ from the
op's signature is an error naming both the function's file:line and the manifest line.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from . import model as m
from .errors import CodegenError
from .render import format_python, render
from .sources import read_text


@dataclass(frozen=True)
class Stub:
    backend: m.Backend
    op: m.Op
    impl: m.Impl
    file: str
    function: str  # the impl's function, or its eager variant's
    eager: bool = False

    @property
    def params(self) -> str:
        return expected_params(self.op, annotated=True)


def expected_params(op: m.Op, annotated: bool) -> str:
    args = [a.python() if annotated else a.python_plain() for a in op.schema.arguments]
    return ", ".join((["self"] if op.has_self else []) + args)


@dataclass
class _Module:
    path: Path
    text: str | None  # None: the file does not exist
    names: dict[str, ast.stmt]  # top-level bindings
    imports_torch: bool
    #: (top-level package, line) of each absolute module-level import
    imports: tuple[tuple[str, int], ...] = ()


def _read_module(path: Path, rel: str) -> _Module:
    if not path.exists():
        return _Module(path, None, {}, False)
    text = read_text(path, rel)
    try:
        tree = ast.parse(text, filename=rel)
    except SyntaxError as exc:
        raise CodegenError(
            rel, exc.lineno, f"cannot parse impl module: {exc.msg}", "valid Python"
        ) from None
    except (ValueError, RecursionError, MemoryError) as exc:  # NUL bytes, absurd nesting
        raise CodegenError(
            rel, None, f"cannot parse impl module: {exc or type(exc).__name__}", "valid Python"
        ) from None
    names: dict[str, ast.stmt] = {}
    imports_torch = False
    imports: list[tuple[str, int]] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            imports += [(alias.name.split(".")[0], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            imports.append((node.module.split(".")[0], node.lineno))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Name):
                        names[sub.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                names[bound] = node
                if isinstance(node, ast.Import) and alias.name == "torch" and not alias.asname:
                    imports_torch = True
    return _Module(path, text, names, imports_torch, tuple(imports))


def _actual(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[list[str], dict[str, object], str]:
    """Parameter names, defaults (literal values, or a marker) and a printable signature."""
    args = fn.args
    positional = args.posonlyargs + args.args
    names = [a.arg for a in positional]
    defaults: dict[str, object] = {}
    for arg, default in zip(positional[len(positional) - len(args.defaults) :], args.defaults):
        try:
            defaults[arg.arg] = ast.literal_eval(default)
        except ValueError:
            defaults[arg.arg] = _Unliteral(ast.unparse(default))
    extras = []
    if args.vararg:
        extras.append("*" + args.vararg.arg)
    extras += [a.arg for a in args.kwonlyargs]
    if args.kwarg:
        extras.append("**" + args.kwarg.arg)
    printable = []
    for name in names:
        printable.append(f"{name}={defaults[name]!r}" if name in defaults else name)
    return names + extras, defaults, f"{fn.name}({', '.join(printable + extras)})"


class _Unliteral:
    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _same(a: object, b: object) -> bool:
    return type(a) is type(b) and a == b


def check_and_scaffold(
    manifest: m.Manifest, root: Path, only: Collection[str] | None = None
) -> dict[str, str]:
    """Check every impl function (of the backends named in ``only`` if given: the others' files
    are not in ``root``); return ``{relpath: new content}`` for modules needing stubs (and the
    package ``__init__.py`` files a new impl package needs)."""
    modules: dict[str, _Module] = {}
    stubs: dict[str, list[Stub]] = {}
    for backend in manifest.backends:
        if only is not None and backend.name not in only:
            continue
        for op, impl in manifest.backend_ops(backend.name):
            functions = [(impl.module, impl.function, False)]
            if impl.eager is not None:
                functions.append((impl.eager[0], impl.eager[1], True))
            for module_name, function, eager in functions:
                rel = f"{backend.path}/impl/{module_name}.py"
                module = modules.get(rel)
                if module is None:
                    module = modules[rel] = _read_module(root / rel, rel)
                    _check_imports(module, rel, root)
                node = module.names.get(function)
                if node is None:
                    stubs.setdefault(rel, []).append(Stub(backend, op, impl, rel, function, eager))
                    continue
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    _check(manifest, op, impl, node, rel)
    out: dict[str, str] = {}
    for rel, items in stubs.items():
        module = modules[rel]
        # one stub per function name (two ops may name the same missing function: an error)
        seen: dict[str, Stub] = {}
        for stub in items:
            if stub.function in seen:
                first = seen[stub.function]
                raise CodegenError(
                    manifest.file,
                    stub.impl.line,
                    (
                        f"ops {first.op.name!r} and {stub.op.name!r} both use {rel}:{stub.function}"
                        if first.op.name != stub.op.name
                        else f"op {stub.op.name!r} uses {rel}:{stub.function} twice"
                    ),
                    "one impl function per op",
                )
            seen[stub.function] = stub
        block = format_python(
            render(
                "impl_stub.py.j2",
                stubs=items,
                needs_torch=module.text is not None and not module.imports_torch,
            )
        )
        if module.text is None:
            backend = items[0].backend
            head = format_python(
                render(
                    "impl_module.py.j2",
                    backend=backend,
                    ops=list(dict.fromkeys(s.op.name for s in items)),
                    # a vendor package's module holding only the package's own ops
                    declared_in=_declared_in(items),
                )
            )
            out[rel] = head + "\n\n" + block.lstrip("\n")
            out.update(_missing_inits(root, backend))
        else:
            out[rel] = module.text.rstrip("\n") + "\n\n\n" + block.lstrip("\n")
    return out


def _declared_in(stubs: list[Stub]) -> str | None:
    """The vendor manifest declaring every op of ``stubs``; None when one is the plugin's."""
    files = {stub.op.declared_in for stub in stubs}
    return files.pop() if len(files) == 1 else None


def _check_imports(module: _Module, rel: str, root: Path) -> None:
    """A module-level import of a package that is neither installed nor in the tree: the module
    would not import, and its backend would vanish from the dispatch table at run time. Only the
    top-level package is looked up (nothing is imported)."""
    for top, line in module.imports:
        if (root / top / "__init__.py").is_file() or (root / f"{top}.py").is_file():
            continue
        try:
            found = importlib.util.find_spec(top) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise CodegenError(
                rel,
                line,
                f"the impl module imports {top!r} at module level, which is not installed here, "
                "so the module does not import",
                f"{top!r} imported inside the function bodies that need it (an impl module "
                "imports on any machine)",
            )


def _missing_inits(root: Path, backend: m.Backend) -> dict[str, str]:
    """``__init__.py`` for a new impl package, its backend package and missing parents."""
    out = {}
    impl_init = f"{backend.path}/impl/__init__.py"
    if not (root / impl_init).exists():
        out[impl_init] = f'"""Hand-written kernels of the {backend.name} backend."""\n'
    parts = backend.package.split(".")
    for depth in range(len(parts), 0, -1):
        init = "/".join(parts[:depth]) + "/__init__.py"
        if (root / init).exists():
            break
        what = f"The {backend.name} backend" if depth == len(parts) else "Backend packages"
        out[init] = f'"""{what} of vllm_fl (scaffolded by `make codegen`)."""\n'
    return out


def _check(
    manifest: m.Manifest,
    op: m.Op,
    impl: m.Impl,
    fn: ast.FunctionDef | ast.AsyncFunctionDef,
    rel: str,
) -> None:
    names, defaults, printable = _actual(fn)
    want_names = list(op.schema.arg_names)
    if op.has_self and names:  # the caller: ``self`` by convention, any name (signatures.py)
        want_names.insert(0, names[0])
    elif op.has_self:
        want_names.insert(0, "self")
    want_defaults = {a.name: a.default_value for a in op.schema.arguments if a.has_default}
    ok = (
        names == want_names
        and set(defaults) == set(want_defaults)
        and all(_same(defaults[k], v) for k, v in want_defaults.items())
    )
    if not ok:
        role = "eager variant of " if impl.eager is not None and fn.name == impl.eager[1] else ""
        raise CodegenError(
            rel,
            fn.lineno,
            f"{printable} does not match {role}op {op.name!r} ({manifest.file}:{impl.line}: "
            f"{op.schema})",
            f"def {fn.name}({expected_params(op, annotated=False)})",
        )

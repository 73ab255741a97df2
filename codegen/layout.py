"""Where the manifest's outputs go, checked before anything is rendered.

A backend package is written into (``register_ops.py``, scaffolded ``impl/`` modules and package
``__init__`` files), so it must lie inside ``vllm_fl`` or inside a top-level package that already
exists in the repository — the generator never creates a top-level package, which could shadow
an installed one (``torch``) for everything run from the repository root — and never inside the
generator's own packages or a folder whose files it generates. Every output path is produced by
one entry of the manifest only; a collision is an error naming both lines.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from . import model as m
from .dest import (
    builtin_backends,
    checks,
    collective_tests,
    collectives,
    docs,
    oot,
    parity,
    register_ops,
    spec,
    trampolines,
)
from .errors import ManifestError

#: the package the generated runtime files live in; backends may always live inside it
HOME = "vllm_fl"
#: top-level packages that are not the plugin's: the generator itself and the test tree
FOREIGN = ("codegen", "tests")
#: folders whose every file the generator writes: no backend package inside them
GENERATED_DIRS = (oot.DIR, parity.DIR)
FIXED = (
    spec.PATH,
    trampolines.PATH,
    checks.PATH,
    builtin_backends.PATH,
    oot.INIT,
    collectives.PATH,
    docs.PATH,
)
#: files earlier versions of the generator wrote: a record may still list them, and the next run
#: deletes them as stale (``vllm_fl/dispatch/ops.py`` held the backend contract before spec.py)
RETIRED = ("vllm_fl/dispatch/ops.py",)


@dataclass(frozen=True)
class Output:
    path: str
    line: int | None  # the manifest line of the entry producing it; None: the manifest itself
    what: str


def check(manifest: m.Manifest, root: Path) -> None:
    """Raise a ManifestError for a backend package outside the allowed places or two outputs
    of the manifest mapping to one file."""
    for backend in manifest.backends:
        _check_package(manifest, backend, root)
    _check_nesting(manifest)
    seen: dict[str, Output] = {}
    for output in outputs(manifest):
        other = seen.get(output.path)
        if other is not None:
            first = "" if other.line is None else f" (line {other.line})"
            raise ManifestError(
                manifest.file,
                output.line,
                f"{output.what} is written to {output.path}, which is already {other.what}{first}",
                "distinct backend packages, impl modules and vLLM layer modules",
            )
        seen[output.path] = output


def outputs(manifest: m.Manifest) -> list[Output]:
    """Every file the manifest makes the generator write (impl modules it may scaffold too)."""
    out = [Output(path, None, "a generated file") for path in FIXED]
    for backend in manifest.backends:
        out.append(
            Output(
                register_ops.path_of(backend),
                backend.line,
                f"the registrations of backend {backend.name!r}",
            )
        )
    modules: set[str] = set()
    for backend in manifest.backends:
        for op, impl in manifest.backend_ops(backend.name):
            for module in filter(None, (impl.module, impl.eager and impl.eager[0])):
                path = f"{backend.path}/impl/{module}.py"
                if path not in modules:  # several ops share a module by design
                    modules.add(path)
                    out.append(Output(path, impl.line, f"impl module {module!r} of op {op.name!r}"))
    shorts: set[str] = set()
    for op in manifest.ops:
        for cls in op.classes:
            if cls.short_module in shorts:
                continue
            shorts.add(cls.short_module)
            out.append(
                Output(
                    oot.module_path(cls),
                    cls.line if isinstance(cls, m.Subclass) else op.line,
                    f"the out-of-tree module of op {op.name!r}",
                )
            )
    parity_ops = parity.tested(manifest)
    if parity_ops:
        out.append(Output(parity.CONFTEST, None, "a generated file"))
    for op in parity_ops:
        out.append(Output(parity.module_path(op), op.line, f"the parity test of op {op.name!r}"))
    if collective_tests.tested(manifest):
        out.append(Output(collective_tests.PATH, None, "a generated file"))
    return out


def may_own(path: str) -> bool:
    """Whether ``path`` is a file the generator can own (the record is checked against it)."""
    pure = PurePosixPath(path)
    if path in FIXED or path in RETIRED or pure.name == register_ops.NAME:
        return True
    return str(pure.parent) in GENERATED_DIRS and pure.suffix == ".py"


def _check_package(manifest: m.Manifest, backend: m.Backend, root: Path) -> None:
    parts = backend.package.split(".")
    top = parts[0]
    where = f"package {backend.package!r} of backend {backend.name!r}"
    expected = (
        f"a package inside {HOME} (like {HOME}.backends.<name>) or inside a "
        f"top-level package that exists in the repository, other than {', '.join(FOREIGN)}"
    )
    if len(parts) < 2:
        raise ManifestError(
            manifest.file, backend.line, f"{where} is a top-level package", expected
        )
    if top in FOREIGN:
        raise ManifestError(
            manifest.file, backend.line, f"{where} lies inside the {top!r} package", expected
        )
    if top != HOME and not (root / top / "__init__.py").is_file():
        raise ManifestError(
            manifest.file,
            backend.line,
            f"{where} would create the top-level package {top!r} in the repository",
            expected,
        )
    for depth in range(2, len(parts) + 1):
        module = "/".join(parts[:depth]) + ".py"
        if (root / module).exists():
            raise ManifestError(
                manifest.file,
                backend.line,
                f"{where} would shadow the module {module}",
                "a package name no module of the repository has",
            )
    for folder in GENERATED_DIRS:
        if backend.path == folder or backend.path.startswith(folder + "/"):
            raise ManifestError(
                manifest.file,
                backend.line,
                f"{where} lies in {folder}/, whose files the generator writes",
                expected,
            )


def _check_nesting(manifest: m.Manifest) -> None:
    """One backend's package inside another's would put its files among the other's impls."""
    for outer in manifest.backends:
        for inner in manifest.backends:
            if inner is not outer and inner.package.startswith(outer.package + "."):
                raise ManifestError(
                    manifest.file,
                    inner.line,
                    f"package {inner.package!r} of backend {inner.name!r} lies inside package "
                    f"{outer.package!r} of backend {outer.name!r} (line {outer.line})",
                    "backend packages side by side, none inside another",
                )

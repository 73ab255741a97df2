"""Names of the manifest that become Python names in generated code, checked against each other
and against the names the generated modules themselves use.

The loader already makes every name an identifier that is no keyword. This pass adds what only
shows once the generated modules are in view: ``def torch(...)`` would shadow the module an
adapter calls, ``def __init__`` would become ``FLBackendBase``'s constructor, a layer module
``__init__`` would replace ``vllm_fl/ops/__init__.py``, two ops could bind one name in a module,
and a 300-character name makes file names the file system refuses.
"""

from __future__ import annotations

from collections.abc import Iterator

from . import model as m
from .errors import ManifestError

#: longest name: file names such as ``test_parity_<op>.py`` stay far below the 255-byte limit
MAX_NAME = 64
#: most parts of a dotted name (a vLLM layer path has 5 or 6)
MAX_PARTS = 10
#: module-level names of the generated modules, and builtins their code calls: an op, argument
#: or attribute of this name would shadow them
GENERATED_NAMES = frozenset(
    {
        "torch",
        "abc",
        "Protocol",
        "BackendImplKind",
        "OpImpl",
        "OpRegistry",
        "Probe",
        "Arg",
        "DeclaredBackend",
        "CustomOp",
        "Impl",
        "Registrations",
        "DECLARED",
        "IMPLS",
        "REGISTRATIONS",
        "REFERENCE_DECLARED",
        "REFERENCE_IMPLS",
        "REFERENCE_REGISTRATIONS",
        "FLBackendBase",
        "OPS",
        "register",
        "available",
        "dispatch_method",
        "pytest",
        "len",
        "Exception",
    }
)
#: private names every register_ops.py may import
REGISTER_OPS_HELPERS = ("_is_compiling", "_attrs", "_flatten", "_backend_probe")
#: a layer class is imported next to this name in its out-of-tree module
OOT_MODULE_NAMES = frozenset({"dispatch_method"})


def check(manifest: m.Manifest) -> None:
    """Raise a ManifestError naming the line of the first name that would break generated code."""
    _Checker(manifest).run()


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


class _Checker:
    def __init__(self, manifest: m.Manifest):
        self.manifest = manifest

    def error(self, line: int, problem: str, expected: str) -> ManifestError:
        return ManifestError(self.manifest.file, line, problem, expected)

    def run(self) -> None:
        for backend in self.manifest.backends:
            self.backend(backend)
        for op in self.manifest.ops:
            self.op(op)
        self.layers()
        self.custom_ops()
        for path in dict.fromkeys(backend.path for backend in self.manifest.backends):
            self.module_names(path)

    # -- single names --------------------------------------------------------------------------

    def name(self, name: str, what: str, line: int) -> None:
        if len(name) > MAX_NAME:
            raise self.error(
                line,
                f"{what} {name[:40]!r}... has {len(name)} characters",
                f"a name of at most {MAX_NAME} characters",
            )
        if _dunder(name):
            raise self.error(
                line,
                f"{what} {name!r} is a special (dunder) name",
                "a name that does not start and end with __",
            )

    def dotted(self, path: str, what: str, line: int) -> None:
        parts = path.split(".")
        if len(parts) > MAX_PARTS:
            raise self.error(
                line,
                f"{what} has {len(parts)} parts",
                f"a dotted name of at most {MAX_PARTS} parts",
            )
        for part in parts:
            self.name(part, f"part of {what} {path[:80]!r},", line)

    def public(self, name: str, what: str, line: int) -> None:
        """An op, argument or attribute name: also not private nor shadowing generated code."""
        self.name(name, what, line)
        if name.startswith("_"):
            raise self.error(line, f"{what} {name!r} starts with _", "a name not starting with _")
        if name in GENERATED_NAMES:
            raise self.error(
                line,
                f"{what} {name!r} would shadow a name of the generated code",
                "a name other than " + ", ".join(sorted(GENERATED_NAMES)),
            )

    # -- entries -------------------------------------------------------------------------------

    def backend(self, backend: m.Backend) -> None:
        what = f"backend {backend.name!r}"
        self.name(backend.name, "backend name", backend.line)
        if backend.vendor is not None:
            self.name(backend.vendor, f"vendor of {what}", backend.line)
        if backend.probe is not None:
            self.name(backend.probe, f"probe of {what}", backend.line)
        self.dotted(backend.package, f"package of {what}", backend.line)
        for module in backend.requires:
            self.dotted(module, f"module required by {what}", backend.line)

    def op(self, op: m.Op) -> None:
        what = f"op {op.name!r}"
        self.public(op.name, "op name", op.line)
        for arg in op.schema.arguments:
            self.public(arg.name, f"argument of {what}", op.line)
        for attr in op.reads:
            self.public(attr.name, f"attribute read by {what}", op.line)
        for cls in op.classes:
            kind, line = _kind_line(op, cls)
            self.dotted(cls.path, f"{kind} of {what}", line)
            if cls.cls.startswith("_") or cls.cls in OOT_MODULE_NAMES:
                raise self.error(
                    line,
                    f"{kind} class {cls.cls!r} of {what} cannot be imported next to the "
                    "generated code's names",
                    "a public class name other than " + ", ".join(sorted(OOT_MODULE_NAMES)),
                )
        for impl in op.impls:
            sub = f"impl {impl.backend!r} of {what}"
            self.name(impl.module, f"module of {sub}", impl.line)
            self.name(impl.function, f"function of {sub}", impl.line)
            if impl.eager is not None:
                self.name(impl.eager[0], f"eager module of {sub}", impl.line)
                self.name(impl.eager[1], f"eager function of {sub}", impl.line)
            for module in impl.requires:
                self.dotted(module, f"module required by {sub}", impl.line)
        if op.tests is not None:
            for case in op.tests.cases:
                for key, _ in case.init:
                    self.name(key, f"init argument of a test case of {what}", case.line)

    # -- names several entries share -----------------------------------------------------------

    def layers(self) -> None:
        """Per out-of-tree module: imported classes, generated classes; per ops.py: protocols."""
        names: dict[tuple[str, str], tuple[m.Op, m.Layer]] = {}
        for op in self.manifest.ops:
            for cls in op.classes:
                kind, line = _kind_line(op, cls)
                for name in (cls.cls, cls.oot_cls):
                    key = (cls.short_module, name)
                    other, other_cls = names.get(key, (None, None))
                    if other is not None and other_cls is not cls:
                        raise self.error(
                            line,
                            f"{kind} {cls.cls} of op {op.name!r} binds {name} in vllm_fl/ops/"
                            f"{cls.short_module}.py, which op {other.name!r} (line "
                            f"{_kind_line(other, other_cls)[1]}) binds too",
                            "layer classes whose names and <name>FL differ",
                        )
                    names[key] = (op, cls)
        protocols: dict[str, m.Op] = {}
        for op in self.manifest.ops:
            if op.layer is None:
                continue
            other = protocols.get(op.camel)
            if other is not None:
                raise self.error(
                    op.line,
                    f"op {op.name!r} and op {other.name!r} (line {other.line}) both make the "
                    f"class {op.camel}Layer",
                    "op names that differ in more than underscores and case",
                )
            protocols[op.camel] = op

    def custom_ops(self) -> None:
        """``vllm_fl::<backend>_<op>`` is defined once per process: no two may coincide."""
        seen: dict[str, tuple[m.Backend, m.Op]] = {}
        for backend in self.manifest.backends:
            if not backend.opaque:
                continue
            for op, impl in self.manifest.backend_ops(backend.name):
                if not op.opaque_ok:
                    continue
                name = f"{backend.name}_{op.name}"
                other = seen.get(name)
                if other is not None:
                    raise self.error(
                        impl.line,
                        f"custom op vllm_fl::{name} of backend {backend.name!r} and op "
                        f"{op.name!r} is also that of backend {other[0].name!r} and op "
                        f"{other[1].name!r}",
                        "backend and op names whose <backend>_<op> differ",
                    )
                seen[name] = (backend, op)

    def module_names(self, path: str) -> None:
        """Every name ``register_ops.py`` binds at module level is bound once (a vendor
        package's file registers its backend and the reference impls of its own ops)."""
        bound = {name: "a helper the generated code imports" for name in REGISTER_OPS_HELPERS}
        for backend in self.manifest.backends:
            if backend.path != path:
                continue
            for name, line, what in self._register_ops_names(backend):
                other = bound.get(name)
                if other is not None and other != what:
                    raise self.error(
                        line,
                        f"{what} and {other} are both named {name} in {path}/register_ops.py",
                        "backend, module and op names that do not combine into the same name",
                    )
                bound[name] = what

    def _register_ops_names(self, backend: m.Backend) -> Iterator[tuple[str, int, str]]:
        for op, impl in self.manifest.backend_ops(backend.name):
            modules = [impl.module] + ([impl.eager[0]] if impl.eager else [])
            for module in modules:
                yield (
                    f"_{backend.name}_{module}",
                    impl.line,
                    f"the import of module {module} of backend {backend.name!r}",
                )
            custom_op = backend.opaque and op.opaque_ok
            if custom_op or impl.eager is not None:
                yield op.name, impl.line, f"the adapter of op {op.name!r} of backend {backend.name!r}"
            if custom_op:
                for name, role in ((f"_{op.name}_kernel", "kernel"), (f"_{op.name}_fake", "fake")):
                    yield name, impl.line, f"the custom op {role} of op {op.name!r} of backend {backend.name!r}"
            if custom_op:
                reference = self.manifest.reference_of(op)
                ref_impl = self.manifest.reference_impl(op)
                if reference is not None and ref_impl is not None:
                    yield (
                        f"_{reference.name}_{ref_impl.module}",
                        impl.line,
                        f"the import of module {ref_impl.module} of backend {reference.name!r}",
                    )


def _kind_line(op: m.Op, cls: m.Layer) -> tuple[str, int]:
    """How errors name one of an op's classes ('layer' or 'subclass') and its manifest line."""
    if isinstance(cls, m.Subclass):
        return "subclass", cls.line
    return "layer", op.line

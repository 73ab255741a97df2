"""Load ops.yaml into the model, refusing to guess.

Every mapping is read through :class:`~codegen.yamlnodes.Fields`: keys are popped one by one and
anything left over is an error. Every error is ``ops.yaml:<line>: <what is wrong>, expected
<what>``. Cross-references (backends named by impls, reference impls for tests, opaque return
forms) are checked after all entries are read.
"""

from __future__ import annotations

import keyword
import re

from codegen import model as m
from codegen.errors import ManifestError
from codegen.signature import FunctionSchema, SignatureError, Type
from codegen.yamlnodes import Entry, Fields, Map, Node, Scalar, Seq, describe, load

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: names the generated code itself uses next to signature arguments and layer attributes
RESERVED = ("self", "layer", "torch", "out")


def is_identifier(name: str) -> bool:
    """A Python identifier that is not a keyword (so it can name a function, module, argument)."""
    return bool(IDENT.match(name)) and not keyword.iskeyword(name)


def is_dotted(name: str) -> bool:
    return all(is_identifier(part) for part in name.split("."))


CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
IMPL_REF = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)\Z")

BACKEND_KEYS = ("kind", "vendor", "package", "priority", "requires", "device", "opaque", "probe")
OP_KEYS = (
    "signature",
    "doc",
    "layer",
    "function",
    "reads",
    "inplace",
    "mutates",
    "impls",
    "tests",
)
IMPL_KEYS = ("fn", "priority", "requires", "eager")
TESTS_KEYS = ("dtypes", "cases", "tolerances", "canonical")
CASE_KEYS = ("init", "inputs")
TENSOR_KEYS = ("shape", "dtype", "high", "scale")
TOL_KEYS = ("atol", "rtol")


def load_manifest(text: str, file: str = "ops.yaml") -> m.Manifest:
    """Parse and validate manifest text; raises ManifestError naming the line."""
    return _Loader(file).manifest(load(text, file))


class _Loader:
    def __init__(self, file: str):
        self.file = file

    # -- small typed readers -------------------------------------------------------------------

    def error(self, line: int | None, problem: str, expected: str | None) -> ManifestError:
        return ManifestError(self.file, line, problem, expected)

    def map(self, node: Node, what: str, expected: str = "a mapping") -> Map:
        if not isinstance(node, Map):
            raise self.error(node.line, f"{what} is {describe(node)}", expected)
        return node

    def seq(self, node: Node, what: str, expected: str) -> Seq:
        if not isinstance(node, Seq):
            raise self.error(node.line, f"{what} is {describe(node)}", expected)
        return node

    def scalar(self, node: Node, what: str, types: tuple[type, ...], expected: str) -> object:
        if not isinstance(node, Scalar) or not isinstance(node.value, types):
            raise self.error(node.line, f"{what} is {describe(node)}", expected)
        if bool not in types and isinstance(node.value, bool):
            raise self.error(node.line, f"{what} is {describe(node)}", expected)
        return node.value

    def string(self, node: Node, what: str, expected: str = "a string") -> str:
        value = self.scalar(node, what, (str,), expected)
        assert isinstance(value, str)
        if not value.strip():
            raise self.error(node.line, f"{what} is empty", expected)
        return value

    def ident(self, node: Node, what: str) -> str:
        expected = "an identifier matching [A-Za-z_][A-Za-z0-9_]* (no Python keyword)"
        value = self.scalar(node, what, (str,), expected)
        if not is_identifier(str(value)):
            raise self.error(node.line, f"{what} {value!r} is not an identifier", expected)
        return str(value)

    def key_ident(self, entry: Entry, what: str) -> str:
        if not is_identifier(entry.key):
            raise self.error(
                entry.key_line,
                f"{what} {entry.key!r} is not an identifier",
                "an identifier matching [A-Za-z_][A-Za-z0-9_]*",
            )
        return entry.key

    def dotted(self, node: Node, what: str) -> str:
        expected = "a dotted Python name like package.module"
        value = self.scalar(node, what, (str,), expected)
        if not is_dotted(str(value)):
            raise self.error(node.line, f"{what} {value!r} is not a dotted Python name", expected)
        return str(value)

    def integer(self, node: Node, what: str) -> int:
        value = self.scalar(node, what, (int,), "an integer")
        assert isinstance(value, int)
        return value

    def number(self, node: Node, what: str) -> float:
        value = self.scalar(node, what, (int, float), "a number")
        assert isinstance(value, (int, float))
        if value < 0 or value != value:
            raise self.error(node.line, f"{what} is {value!r}", "a non-negative number")
        return float(value)

    def boolean(self, node: Node, what: str) -> bool:
        value = self.scalar(node, what, (bool,), "true or false")
        assert isinstance(value, bool)
        return value

    def modules(self, node: Node, what: str) -> tuple[str, ...]:
        items = self.seq(node, what, "a list of module names like [flag_gems]")
        return tuple(self.dotted(item, f"module in {what}") for item in items.items)

    def type_(self, node: Node, what: str) -> Type:
        text = self.string(node, what, "a type (Tensor, int, float, bool, str, optionally with ?)")
        try:
            return Type.parse(text)
        except SignatureError as exc:
            raise self.error(
                node.line,
                f"{what} {text!r}: {exc}",
                "a type (Tensor, int, float, bool, str, optionally with ?)",
            ) from None

    # -- sections ------------------------------------------------------------------------------

    def manifest(self, root: Node | None) -> m.Manifest:
        if root is None:
            raise self.error(1, "the manifest is empty", "a mapping with backends, tolerances, ops")
        top = Fields(
            self.map(root, "the manifest", "a mapping with backends, tolerances, ops"),
            "the manifest",
            self.file,
            ("backends", "tolerances", "ops"),
        )
        backends_entry = top.require("backends", "a mapping of backend name -> settings")
        tolerances_entry = top.pop("tolerances")
        ops_entry = top.require("ops", "a mapping of op name -> definition")
        top.done()

        backends = self.backends(backends_entry)
        tolerances = (
            self.tolerances(tolerances_entry.value, "tolerances") if tolerances_entry else ()
        )
        ops_map = self.map(ops_entry.value, "ops", "a mapping of op name -> definition")
        if not ops_map.entries:
            raise self.error(ops_entry.key_line, "ops is empty", "at least one op")
        by_name = {b.name: b for b in backends}
        ops = tuple(self.op(entry, by_name, dict(tolerances)) for entry in ops_map.entries.values())
        self.check_targets(ops)
        return m.Manifest(self.file, backends, tolerances, ops)

    def backends(self, entry: Entry) -> tuple[m.Backend, ...]:
        node = self.map(entry.value, "backends", "a mapping of backend name -> settings")
        if not node.entries:
            raise self.error(entry.key_line, "backends is empty", "at least one backend")
        backends: list[m.Backend] = []
        impl_ids: dict[str, m.Backend] = {}
        packages: dict[str, m.Backend] = {}
        for item in node.entries.values():
            backend = self.backend(item)
            other = impl_ids.get(backend.impl_id)
            if other is not None:
                raise self.error(
                    backend.line,
                    f"backend {backend.name!r} has impl id {backend.impl_id!r}, "
                    f"already used by backend {other.name!r} (line {other.line})",
                    "one flagos backend, one reference backend and distinct vendor names",
                )
            impl_ids[backend.impl_id] = backend
            other = packages.get(backend.package)
            if other is not None:
                raise self.error(
                    backend.line,
                    f"backend {backend.name!r} uses package {backend.package!r}, "
                    f"already used by backend {other.name!r} (line {other.line})",
                    "a package of its own for every backend",
                )
            packages[backend.package] = backend
            backends.append(backend)
        return tuple(backends)

    def backend(self, entry: Entry) -> m.Backend:
        name = self.key_ident(entry, "backend name")
        what = f"backend {name!r}"
        f = Fields(
            self.map(entry.value, what, "a mapping with kind, package, priority, ..."),
            what,
            self.file,
            BACKEND_KEYS,
        )
        kind_entry = f.require("kind", " | ".join(m.KINDS))
        kind = self.ident(kind_entry.value, f"kind of {what}")
        if kind not in m.KINDS:
            raise self.error(
                kind_entry.value.line, f"kind of {what} is {kind!r}", " | ".join(m.KINDS)
            )
        vendor_entry = f.pop("vendor")
        vendor = self.ident(vendor_entry.value, f"vendor of {what}") if vendor_entry else None
        if kind == "vendor" and vendor is None:
            raise self.error(
                entry.value.line, f"{what} has kind vendor but no 'vendor'", "vendor: <vendor name>"
            )
        if kind != "vendor" and vendor_entry is not None:
            raise self.error(
                vendor_entry.key_line,
                f"{what} has kind {kind} and a 'vendor'",
                "'vendor' only with kind: vendor",
            )
        package = self.dotted(
            f.require("package", "the Python package").value, f"package of {what}"
        )
        priority = self.integer(f.require("priority", "an integer").value, f"priority of {what}")
        requires_entry = f.pop("requires")
        requires = (
            self.modules(requires_entry.value, f"requires of {what}") if requires_entry else ()
        )
        device_entry = f.pop("device")
        device = None
        if device_entry is not None:
            device = self.scalar(
                device_entry.value, f"device of {what}", (str,), " | ".join(m.DEVICES)
            )
            if device not in m.DEVICES:
                raise self.error(
                    device_entry.value.line,
                    f"device of {what} is {device!r}",
                    " | ".join(m.DEVICES),
                )
        opaque_entry = f.pop("opaque")
        opaque = self.boolean(opaque_entry.value, f"opaque of {what}") if opaque_entry else False
        probe_entry = f.pop("probe")
        probe = self.ident(probe_entry.value, f"probe of {what}") if probe_entry else None
        f.done()
        return m.Backend(
            name, kind, vendor, package, priority, requires, device, opaque, probe, entry.key_line
        )

    def tolerances(self, node: Node, what: str) -> tuple[tuple[str, m.Tolerance], ...]:
        table = self.map(node, what, "a mapping of dtype -> {atol, rtol}")
        result = []
        for entry in table.entries.values():
            if entry.key not in m.DTYPES:
                raise self.error(
                    entry.key_line,
                    f"unknown dtype {entry.key!r} in {what}",
                    "one of " + ", ".join(m.DTYPES),
                )
            sub = f"{what}.{entry.key}"
            f = Fields(
                self.map(entry.value, sub, "{atol: <number>, rtol: <number>}"),
                sub,
                self.file,
                TOL_KEYS,
            )
            atol = self.number(f.require("atol", "a number").value, f"atol of {sub}")
            rtol = self.number(f.require("rtol", "a number").value, f"rtol of {sub}")
            f.done()
            result.append((entry.key, m.Tolerance(atol, rtol)))
        return tuple(result)

    # -- ops -----------------------------------------------------------------------------------

    def op(
        self, entry: Entry, backends: dict[str, m.Backend], tolerances: dict[str, m.Tolerance]
    ) -> m.Op:
        name = self.key_ident(entry, "op name")
        what = f"op {name!r}"
        f = Fields(
            self.map(entry.value, what, "a mapping with signature, doc, impls, ..."),
            what,
            self.file,
            OP_KEYS,
        )
        sig_node = f.require("signature", f"{name}(Tensor x, ...) -> Tensor").value
        schema = self.signature(sig_node, name)
        doc_node = f.require("doc", "a one-paragraph description").value
        doc = self.string(doc_node, f"doc of {what}")
        if CONTROL.search(doc):
            raise self.error(
                doc_node.line, f"doc of {what} contains a control character", "printable text"
            )
        layer_entry = f.pop("layer")
        layer = self.layer(layer_entry.value, what) if layer_entry else None
        function_entry = f.pop("function")
        function = self.function(function_entry.value, what) if function_entry else None
        if function_entry is not None and layer is not None:
            raise self.error(
                function_entry.key_line,
                f"{what} has both 'layer' and 'function'",
                "'layer' for a vLLM CustomOp class, 'function' for a function vLLM calls",
            )
        reads_entry = f.pop("reads")
        reads: tuple[m.Attr, ...] = ()
        if reads_entry is not None:
            if layer is None:
                raise self.error(
                    reads_entry.key_line,
                    f"{what} has 'reads' but no 'layer'",
                    "'reads' only for ops with a layer",
                )
            reads = self.reads(reads_entry.value, what, schema)
        inplace_entry = f.pop("inplace")
        inplace = self.inplace(inplace_entry.value, what, schema) if inplace_entry else ()
        mutates_entry = f.pop("mutates")
        mutates = (
            self.tensor_args(mutates_entry.value, f"mutates of {what}", schema)
            if mutates_entry
            else ()
        )
        self.check_mutates(what, schema, mutates, sig_node.line, inplace_entry)
        impls_entry = f.require("impls", "a mapping of backend -> module.function")
        impls = self.impls(impls_entry, what, backends, inplace)
        tests_entry = f.pop("tests")
        tests = (
            self.tests(tests_entry.value, what, schema, layer, tolerances) if tests_entry else None
        )
        if (
            tests is not None
            and tests.canonical is not None
            and not (mutates or schema.returns.all_tensors)
        ):
            raise self.error(
                tests_entry.key_line,
                f"tests of {what} name a 'canonical' form but the op returns {schema.returns}",
                "'canonical' only for ops that return tensors or write into mutates arguments",
            )
        f.done()
        op = m.Op(
            name,
            schema,
            doc.strip(),
            layer,
            reads,
            impls,
            tests,
            entry.key_line,
            inplace,
            function,
            mutates,
        )
        self.check_op(op, backends, sig_node.line, tests_entry)
        return op

    def signature(self, node: Node, name: str) -> FunctionSchema:
        expected = f"{name}(Type arg, Type? arg=default, ...) -> Return"
        text = self.string(node, f"signature of op {name!r}", expected)
        try:
            schema = FunctionSchema.parse(" ".join(text.split()))
        except SignatureError as exc:
            raise self.error(node.line, f"bad signature of op {name!r}: {exc}", expected) from None
        for arg in schema.arguments:
            if keyword.iskeyword(arg.name) or arg.name in RESERVED or arg.name.startswith("_"):
                raise self.error(
                    node.line,
                    f"argument {arg.name!r} of op {name!r} is a reserved " "name",
                    "a name that is no keyword, not one of "
                    + ", ".join(RESERVED)
                    + " and not starting with _",
                )
        if schema.name != name:
            raise self.error(
                node.line,
                f"signature names {schema.name!r} under op {name!r}",
                f"a signature starting with {name}(",
            )
        return schema

    def import_path(self, node: Node, what: str, example: str) -> tuple[str, str]:
        """A dotted ``module.name`` (a vLLM class or function): (module, name)."""
        path = self.dotted(node, what)
        if "." not in path:
            raise self.error(
                node.line, f"{what} {path!r} has no module", f"an import path like {example}"
            )
        module, name = path.rsplit(".", 1)
        return module, name

    def layer(self, node: Node, what: str) -> m.Layer:
        return m.Layer(
            *self.import_path(
                node, f"layer of {what}", "vllm.model_executor.layers.layernorm.RMSNorm"
            )
        )

    def reads(self, node: Node, what: str, schema: FunctionSchema) -> tuple[m.Attr, ...]:
        table = self.map(node, f"reads of {what}", "a mapping of attribute -> type")
        attrs = []
        for entry in table.entries.values():
            attr = self.key_ident(entry, f"attribute of {what}")
            if attr in RESERVED or attr.startswith("_"):
                raise self.error(
                    entry.key_line,
                    f"attribute {attr!r} of {what} is a reserved " "name",
                    "not one of " + ", ".join(RESERVED) + " and not starting with _",
                )
            if schema.argument(attr) is not None:
                raise self.error(
                    entry.key_line,
                    f"attribute {attr!r} of {what} has the name of " "a signature argument",
                    "attribute names distinct from arguments",
                )
            attrs.append(m.Attr(attr, self.type_(entry.value, f"type of {what}.reads.{attr}")))
        return tuple(attrs)

    def function(self, node: Node, what: str) -> m.Function:
        return m.Function(
            *self.import_path(node, f"function of {what}", "vllm._custom_ops.topk_softmax")
        )

    def check_mutates(
        self,
        what: str,
        schema: FunctionSchema,
        mutates: tuple[str, ...],
        sig_line: int,
        inplace_entry: Entry | None,
    ) -> None:
        returns_none = any(form.is_none for form in schema.returns.forms)
        if mutates and not returns_none:
            raise self.error(
                sig_line,
                f"{what} declares 'mutates' but returns {schema.returns}",
                "-> None: an op writes into its mutates arguments or returns its results",
            )
        if returns_none and not mutates:
            raise self.error(
                sig_line,
                f"{what} returns None but declares no 'mutates' arguments",
                "mutates: [the Tensor arguments every impl writes into]",
            )
        if mutates and inplace_entry is not None:
            raise self.error(
                inplace_entry.key_line,
                f"{what} has both 'mutates' and 'inplace'",
                "'inplace' only for functional ops with an in-place eager variant",
            )

    def inplace(self, node: Node, what: str, schema: FunctionSchema) -> tuple[str, ...]:
        return self.tensor_args(node, f"inplace of {what}", schema)

    def tensor_args(self, node: Node, sub: str, schema: FunctionSchema) -> tuple[str, ...]:
        expected = "a list of the signature's Tensor arguments, like [x, residual]"
        items = self.seq(node, sub, expected)
        if not items.items:
            raise self.error(items.line, f"{sub} is empty", expected)
        names: list[str] = []
        for item in items.items:
            name = self.ident(item, f"argument in {sub}")
            arg = schema.argument(name)
            if arg is None:
                raise self.error(
                    item.line,
                    f"{sub} names {name!r}, which is not an argument",
                    "one of " + ", ".join(schema.arg_names),
                )
            if not arg.type.is_tensor:
                raise self.error(
                    item.line, f"{sub} names {name!r} of type {arg.type}", "Tensor arguments only"
                )
            if name in names:
                raise self.error(item.line, f"{sub} lists {name!r} twice", "each argument once")
            names.append(name)
        return tuple(names)

    def impls(
        self,
        entry: Entry,
        what: str,
        backends: dict[str, m.Backend],
        inplace: tuple[str, ...] = (),
    ) -> tuple[m.Impl, ...]:
        table = self.map(entry.value, f"impls of {what}", "a mapping of backend -> module.function")
        if not table.entries:
            raise self.error(entry.key_line, f"impls of {what} is empty", "at least one backend")
        result = []
        for item in table.entries.values():
            backend = self.key_ident(item, f"backend in impls of {what}")
            if backend not in backends:
                raise self.error(
                    item.key_line,
                    f"impls of {what} names undeclared backend " f"{backend!r}",
                    "one of " + ", ".join(backends),
                )
            result.append(self.impl(item, backend, what, inplace))
        return tuple(result)

    def impl(self, entry: Entry, backend: str, what: str, inplace: tuple[str, ...]) -> m.Impl:
        sub = f"impl {backend!r} of {what}"
        priority = None
        requires: tuple[str, ...] = ()
        eager: tuple[str, str] | None = None
        expected = "module.function (e.g. normalization.rms_norm) or {fn: ..., priority: ...}"
        node = entry.value
        if isinstance(node, Map):
            f = Fields(node, sub, self.file, IMPL_KEYS)
            fn_node = f.require("fn", "module.function").value
            prio = f.pop("priority")
            priority = self.integer(prio.value, f"priority of {sub}") if prio else None
            req = f.pop("requires")
            requires = self.modules(req.value, f"requires of {sub}") if req else ()
            eager_entry = f.pop("eager")
            if eager_entry is not None:
                if not inplace:
                    raise self.error(
                        eager_entry.key_line,
                        f"{sub} has an 'eager' variant but {what} declares no 'inplace' arguments",
                        "'eager' only for ops with inplace: [...]",
                    )
                eager = self.fn_ref(
                    eager_entry.value,
                    f"eager variant of {sub}",
                    "module.function (e.g. normalization.rms_norm_inplace)",
                )
            f.done()
        else:
            fn_node = node
        module, function = self.fn_ref(fn_node, sub, expected)
        if eager == (module, function):
            raise self.error(
                fn_node.line,
                f"eager variant of {sub} is the impl itself",
                "a separate in-place function, e.g. normalization.rms_norm_inplace",
            )
        return m.Impl(backend, module, function, priority, requires, entry.key_line, eager)

    def fn_ref(self, node: Node, what: str, expected: str) -> tuple[str, str]:
        ref = self.scalar(node, what, (str,), expected)
        match = IMPL_REF.match(str(ref))
        if match is None or not is_dotted(str(ref)):
            raise self.error(node.line, f"{what} is {str(ref)!r}", expected)
        return match.group(1), match.group(2)

    # -- tests ---------------------------------------------------------------------------------

    def tests(
        self,
        node: Node,
        what: str,
        schema: FunctionSchema,
        layer: m.Layer | None,
        tolerances: dict[str, m.Tolerance],
    ) -> m.Tests:
        sub = f"tests of {what}"
        f = Fields(
            self.map(node, sub, "a mapping with dtypes and cases"), sub, self.file, TESTS_KEYS
        )
        dtypes_node = self.seq(
            f.require("dtypes", "[float32, float16, bfloat16]").value,
            f"dtypes of {what}",
            "a list like [float32, float16, bfloat16]",
        )
        dtypes = []
        for item in dtypes_node.items:
            dtype = self.scalar(item, f"dtype in {sub}", (str,), "one of " + ", ".join(m.DTYPES))
            if dtype not in m.DTYPES:
                raise self.error(
                    item.line, f"unknown dtype {dtype!r} in {sub}", "one of " + ", ".join(m.DTYPES)
                )
            if dtype in dtypes:
                raise self.error(
                    item.line, f"dtype {dtype!r} listed twice in {sub}", "each dtype once"
                )
            dtypes.append(str(dtype))
        if not dtypes:
            raise self.error(dtypes_node.line, f"dtypes of {what} is empty", "at least one dtype")
        cases_node = self.seq(
            f.require("cases", "a list of {init, inputs}").value,
            f"cases of {what}",
            "a list of {init: ..., inputs: ...}",
        )
        if not cases_node.items:
            raise self.error(cases_node.line, f"cases of {what} is empty", "at least one case")
        cases = tuple(self.case(c, what, schema, layer) for c in cases_node.items)
        tol_entry = f.pop("tolerances")
        own = dict(self.tolerances(tol_entry.value, f"tolerances of {what}")) if tol_entry else {}
        canonical_entry = f.pop("canonical")
        canonical = None
        if canonical_entry is not None:
            canonical = self.fn_ref(
                canonical_entry.value,
                f"canonical of {sub}",
                "module.function under the reference backend's impl/ package",
            )
        f.done()
        resolved = []
        for dtype in dtypes:
            tol = own.get(dtype) or tolerances.get(dtype)
            if tol is None:
                raise self.error(
                    dtypes_node.line,
                    f"dtype {dtype!r} of {what} has no tolerance",
                    f"{dtype} in the top-level tolerances or in the op's tests",
                )
            resolved.append((dtype, tol))
        return m.Tests(tuple(dtypes), cases, tuple(resolved), node.line, canonical)

    def case(self, node: Node, what: str, schema: FunctionSchema, layer: m.Layer | None) -> m.Case:
        sub = f"test case of {what}"
        f = Fields(
            self.map(node, sub, "a mapping with inputs (and init)"), sub, self.file, CASE_KEYS
        )
        init_entry = f.pop("init")
        init: list[tuple[str, object]] = []
        if init_entry is not None:
            if layer is None:
                raise self.error(
                    init_entry.key_line,
                    f"{sub} has 'init' but the op has no layer",
                    "'init' only for ops with a layer",
                )
            table = self.map(init_entry.value, f"init of {sub}", "a mapping of argument -> value")
            for entry in table.entries.values():
                key = self.key_ident(entry, f"init argument of {sub}")
                init.append((key, self.literal(entry.value, f"init argument {key!r} of {sub}")))
        inputs_entry = f.require("inputs", "a mapping of argument -> shape")
        table = self.map(inputs_entry.value, f"inputs of {sub}", "a mapping of argument -> shape")
        given: dict[str, m.TensorInput | m.LiteralInput] = {}
        for entry in table.entries.values():
            arg = schema.argument(entry.key)
            if arg is None:
                raise self.error(
                    entry.key_line,
                    f"input {entry.key!r} of {sub} is not an " "argument",
                    "one of " + ", ".join(schema.arg_names),
                )
            given[entry.key] = self.input(entry.value, f"input {entry.key!r} of {sub}", arg.type)
        for arg in schema.arguments:
            if arg.name not in given and not arg.has_default:
                raise self.error(
                    inputs_entry.value.line,
                    f"inputs of {sub} lack required " f"argument {arg.name!r}",
                    f"a value for {arg.name}",
                )
        f.done()
        ordered = tuple((a.name, given[a.name]) for a in schema.arguments if a.name in given)
        return m.Case(tuple(init), ordered, node.line)

    def literal(self, node: Node, what: str) -> object:
        return self.scalar(
            node,
            what,
            (str, int, float, bool, type(None)),
            "a string, number, boolean, null or $dtype",
        )

    def shape(self, node: Node, what: str) -> tuple[int, ...]:
        items = self.seq(node, f"shape of {what}", "a list of positive integers like [7, 256]")
        dims = []
        for item in items.items:
            dim = self.scalar(item, f"dimension in {what}", (int,), "a positive integer")
            assert isinstance(dim, int)
            if dim <= 0 or dim > 1 << 20:
                raise self.error(
                    item.line, f"dimension {dim} in {what}", "a positive integer up to 1048576"
                )
            dims.append(dim)
        if not dims:
            raise self.error(items.line, f"shape of {what} is empty", "at least one dimension")
        return tuple(dims)

    def input(self, node: Node, what: str, type_: Type) -> m.TensorInput | m.LiteralInput:
        if not type_.is_tensor:
            value = self.literal(node, what)
            if not type_.accepts(value):
                raise self.error(node.line, f"{what} is {describe(node)}", f"a {type_} literal")
            return m.LiteralInput(value)
        if isinstance(node, Seq):
            return m.TensorInput(self.shape(node, what), m.DTYPE_PLACEHOLDER, None)
        if isinstance(node, Map):
            f = Fields(node, what, self.file, TENSOR_KEYS)
            shape = self.shape(f.require("shape", "[dims...]").value, what)
            dtype_entry = f.pop("dtype")
            dtype = m.DTYPE_PLACEHOLDER
            allowed = (m.DTYPE_PLACEHOLDER,) + m.DTYPES + m.INT_DTYPES
            if dtype_entry is not None:
                dtype = str(
                    self.scalar(
                        dtype_entry.value,
                        f"dtype of {what}",
                        (str,),
                        "one of " + ", ".join(allowed),
                    )
                )
                if dtype not in allowed:
                    raise self.error(
                        dtype_entry.value.line,
                        f"dtype of {what} is {dtype!r}",
                        "one of " + ", ".join(allowed),
                    )
            high_entry = f.pop("high")
            high = self.integer(high_entry.value, f"high of {what}") if high_entry else None
            scale_entry = f.pop("scale")
            scale = self.number(scale_entry.value, f"scale of {what}") if scale_entry else None
            f.done()
            if scale is not None and not (0 < scale < 1e6):
                raise self.error(
                    scale_entry.value.line,
                    f"scale of {what} is {scale!r}",
                    "a finite number above 0 (the standard deviation of the random values)",
                )
            if scale is not None and dtype in m.INT_DTYPES:
                raise self.error(
                    scale_entry.key_line,
                    f"integer tensor {what} has 'scale'",
                    "'scale' only with a floating-point dtype",
                )
            if dtype in m.INT_DTYPES and (high is None or high <= 0):
                raise self.error(
                    node.line,
                    f"integer tensor {what} has no positive 'high'",
                    "high: N (values are drawn from [0, N))",
                )
            if dtype not in m.INT_DTYPES and high_entry is not None:
                raise self.error(
                    high_entry.key_line,
                    f"floating-point tensor {what} has 'high'",
                    "'high' only with an integer dtype",
                )
            return m.TensorInput(shape, dtype, high, scale)
        value = self.literal(node, what)
        if value is None and type_.optional:
            return m.LiteralInput(None)
        raise self.error(
            node.line,
            f"{what} is {describe(node)}",
            "a shape like [7, 256], {shape: ..., dtype: ..., high: ...}"
            + (" or null" if type_.optional else ""),
        )

    # -- cross checks --------------------------------------------------------------------------

    def check_op(
        self, op: m.Op, backends: dict[str, m.Backend], sig_line: int, tests_entry: Entry | None
    ) -> None:
        reference = next((b for b in backends.values() if b.kind == "reference"), None)
        ref_impl = op.impl(reference.name) if reference else None
        if tests_entry is not None and ref_impl is None:
            raise self.error(
                tests_entry.key_line,
                f"op {op.name!r} has tests but no reference " "impl to compare with",
                "an impls entry for the reference backend",
            )
        for impl in op.impls:
            backend = backends[impl.backend]
            if not (backend.opaque and op.opaque_ok):
                continue
            if ref_impl is None:
                raise self.error(
                    impl.line,
                    f"op {op.name!r} is implemented by opaque backend "
                    f"{backend.name!r} but has no reference impl for the custom op's "
                    "fake",
                    "an impls entry for the reference backend",
                )
            if not op.schema.returns.is_single_tensor:
                try:
                    op.schema.returns.tensor_list_decoding()
                except SignatureError as exc:
                    raise self.error(
                        sig_line,
                        f"op {op.name!r} cannot be wrapped as a custom op "
                        f"for opaque backend {backend.name!r}: {exc}",
                        "return forms that differ in their number of tensors",
                    ) from None

    def check_targets(self, ops: tuple[m.Op, ...]) -> None:
        """One op per vLLM class and per vLLM function; OOT modules with distinct names."""
        by_cls: dict[str, m.Op] = {}
        by_module: dict[str, m.Op] = {}
        by_function: dict[str, m.Op] = {}
        for op in ops:
            if op.function is not None:
                other = by_function.get(op.function.path)
                if other is not None:
                    raise self.error(
                        op.line,
                        f"op {op.name!r} replaces {op.function.path}, already "
                        f"replaced by op {other.name!r} (line {other.line})",
                        "one op per vLLM function",
                    )
                by_function[op.function.path] = op
            if op.layer is None:
                continue
            other = by_cls.get(op.layer.cls)
            if other is not None:
                raise self.error(
                    op.line,
                    f"op {op.name!r} replaces {op.layer.cls}, already "
                    f"replaced by op {other.name!r} (line {other.line})",
                    "one op per vLLM class",
                )
            by_cls[op.layer.cls] = op
            other = by_module.get(op.layer.short_module)
            if (
                other is not None
                and other.layer is not None
                and other.layer.module != op.layer.module
            ):
                raise self.error(
                    op.line,
                    f"layer module {op.layer.module} of op {op.name!r} "
                    f"ends like {other.layer.module} (op {other.name!r})",
                    "vLLM modules with distinct last names",
                )
            by_module[op.layer.short_module] = op

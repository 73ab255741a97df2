"""What an op replaces in vLLM: a ``layer`` (a CustomOp class, with the attributes its impls
``reads``, and the ``subclasses`` of it that compute what it computes), a ``function`` vLLM
calls or a ``collective`` (a method of vLLM's device communicator); and the check that no two
ops replace the same one."""

from __future__ import annotations

from .. import model as m
from .reader import Reader
from ..signature import FunctionSchema
from ..yamlnodes import Entry, Node

#: names the generated code itself uses next to signature arguments and layer attributes
RESERVED = ("self", "layer", "torch", "out")


def read_layer(r: Reader, node: Node, what: str) -> m.Layer:
    return m.Layer(
        *r.import_path(node, f"layer of {what}", "vllm.model_executor.layers.layernorm.RMSNorm")
    )


SUBCLASS_EXAMPLE = "vllm.model_executor.layers.rotary_embedding.llama3_rope.Llama3RotaryEmbedding"


def read_subclasses(r: Reader, node: Node, what: str, layer: m.Layer) -> tuple[m.Subclass, ...]:
    """``subclasses``: import paths of vLLM classes that subclass ``layer`` and compute what it
    computes. Each is a class path (a capitalised last part) in the layer's package, neither the
    layer itself nor listed twice; whether vLLM has it and keeps the layer's ``forward_*`` is
    checked where vLLM is (`vllm_fl.registration`), since it differs between vLLM versions."""
    key = f"subclasses of {what}"
    items = r.seq(node, key, f"a list of vLLM class paths like [{SUBCLASS_EXAMPLE}]")
    out: list[m.Subclass] = []
    for item in items.items:
        entry = f"entry of {key}"
        module, cls = r.import_path(item, entry, SUBCLASS_EXAMPLE)
        path = f"{module}.{cls}"
        if not cls[:1].isupper():
            raise r.error(
                item.line,
                f"{entry} {path!r} does not name a class ({cls!r} is not capitalised)",
                f"the import path of a vLLM class like {SUBCLASS_EXAMPLE}",
            )
        top = layer.module.split(".")[0]
        if module.split(".")[0] != top:
            raise r.error(
                item.line,
                f"{entry} {path!r} lies outside {top!r}, the package of the layer {layer.path}",
                f"a class of {top} that subclasses {layer.cls}",
            )
        if cls == layer.cls:
            raise r.error(
                item.line,
                f"{entry} {path!r} has the name of the layer {layer.path}",
                f"a subclass of {layer.cls} with a name of its own (vLLM replaces classes by name)",
            )
        other = next((s for s in out if s.cls == cls), None)
        if other is not None:
            raise r.error(
                item.line,
                f"{entry} {path!r} is listed already (line {other.line}"
                + (f": {other.path}" if other.path != path else "")
                + ")",
                "each class once (vLLM replaces classes by name)",
            )
        out.append(m.Subclass(module, cls, line=item.line))
    if not out:
        raise r.error(items.line, f"{key} is an empty list", "at least one class path, or no key")
    return tuple(out)


def read_function(r: Reader, node: Node, what: str) -> m.Function:
    return m.Function(*r.import_path(node, f"function of {what}", "vllm._custom_ops.topk_softmax"))


#: the methods of vLLM's ``DeviceCommunicatorBase`` a collective op may replace: those vLLM's
#: ``GroupCoordinator`` calls with tensors (the rest are set-up and bookkeeping)
COMMUNICATOR_METHODS = (
    "all_reduce",
    "all_gather",
    "all_gatherv",
    "reduce_scatter",
    "reduce_scatterv",
    "gather",
    "send",
    "recv",
)


def read_collective(r: Reader, node: Node, what: str) -> str:
    method = r.ident(node, f"collective of {what}")
    if method not in COMMUNICATOR_METHODS:
        raise r.error(
            node.line,
            f"collective of {what} is {method!r}, no method of vLLM's device communicator "
            "the plugin replaces",
            "one of " + ", ".join(COMMUNICATOR_METHODS),
        )
    return method


#: the communicator methods whose ops the generated tests/generated/test_collectives.py checks
#: (``vllm_fl.testing.collectives.ORACLES`` computes what each returns; a test keeps both
#: equal); ``recv`` is checked by ``send``'s tests, each send received by the recv of the same
#: backend
TESTED_COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gatherv",
    "reduce_scatter",
    "reduce_scatterv",
    "gather",
    "send",
)


def check_tested_collective(r: Reader, entry: Entry, what: str, method: str) -> None:
    """A collective with ``tests:`` (``entry``) replaces a method the harness has an oracle for
    (checked before the tests are read: recv's could not even be written)."""
    if method == "recv":
        raise r.error(
            entry.key_line,
            f"{what} replaces recv and has tests",
            "no tests: the tests of the op replacing send check recv (each send is received by "
            "the recv of the same backend)",
        )
    if method not in TESTED_COLLECTIVES:
        raise r.error(
            entry.key_line,
            f"{what} replaces {method}, which the collectives' tests cannot check",
            "tests only for the ops replacing " + ", ".join(TESTED_COLLECTIVES),
        )


def check_collective_tests(r: Reader, entry: Entry, what: str, tests: m.Tests) -> None:
    """The tests of a collective: inputs the harness can draw on every rank (shapes,
    ``{shape, dtype, ...}``, ``{values}``, lists of them, literals, each the same on every rank
    or ``{per_rank: [...]}``), no canonical form and no round trip."""
    sub = f"tests of {what}"
    for key, present in (
        ("canonical", tests.canonical is not None),
        ("round_trip", tests.round_trip is not None),
    ):
        if present:
            raise r.error(
                entry.key_line,
                f"{sub} have a '{key}', but the op is a collective",
                f"no '{key}': a collective is compared with what it computes from every rank's "
                "inputs",
            )
    for case in tests.cases:
        for name, spec in case.inputs:
            drawable = (m.TensorInput, m.LiteralInput, m.TensorListInput, m.PerRankInput)
            if not isinstance(spec, drawable):
                raise r.error(
                    case.line,
                    f"input {name!r} of a test case of {what} is quantized or derived",
                    "a shape, {shape: ..., dtype: ...}, {values: [...]}, a list of them, a "
                    "literal or {per_rank: [...]} (each rank draws a collective's inputs itself)",
                )


def check_no_tensor_list(r: Reader, what: str, schema: FunctionSchema, sig_line: int) -> None:
    """Only a collective takes or returns tensor lists (``Tensor[]``): the parity tests and the
    torch.library wrappers of the other ops have none."""
    if schema.has_tensor_list:
        raise r.error(
            sig_line,
            f"{what} takes or returns a Tensor[] but replaces no communicator method",
            "Tensor[] only in the signature of an op with 'collective:'",
        )


def check_no_per_rank(r: Reader, what: str, tests: m.Tests) -> None:
    """Only a collective's test inputs differ between ranks (``per_rank``): the other ops run
    in one process."""
    for case in tests.cases:
        for name, spec in case.inputs:
            if isinstance(spec, m.PerRankInput):
                raise r.error(
                    case.line,
                    f"input {name!r} of a test case of {what} is per_rank, but the op is no "
                    "collective",
                    "the same input for the one process that runs the op (per_rank only in "
                    "a collective's tests)",
                )


def check_collective_pairs(r: Reader, ops: tuple[m.Op, ...]) -> None:
    """A tested send is received by the recv of the same backend: the manifest has an op
    replacing recv, implemented by every backend implementing send."""
    recv = next((op for op in ops if op.collective == "recv"), None)
    for op in ops:
        if op.collective != "send" or op.tests is None:
            continue
        if recv is None:
            raise r.error(
                op.line,
                f"op {op.name!r} replaces send and has tests, but no op replaces recv",
                "an op with 'collective: recv' (send's tests receive with it)",
            )
        for impl in op.impls:
            if recv.impl(impl.backend) is None:
                raise r.error(
                    impl.line,
                    f"backend {impl.backend!r} implements op {op.name!r} (send) but not op "
                    f"{recv.name!r} (recv, line {recv.line})",
                    f"a {impl.backend} impl of {recv.name} too (send's tests receive with it)",
                )


def read_reads(r: Reader, node: Node, what: str, schema: FunctionSchema) -> tuple[m.Attr, ...]:
    """The layer attributes an op's impls read through ``self``, with their types."""
    table = r.map(node, f"reads of {what}", "a mapping of attribute -> type")
    attrs = []
    for entry in table.entries.values():
        attr = r.key_ident(entry, f"attribute of {what}")
        if attr in RESERVED or attr.startswith("_"):
            raise r.error(
                entry.key_line,
                f"attribute {attr!r} of {what} is a reserved name",
                "not one of " + ", ".join(RESERVED) + " and not starting with _",
            )
        if schema.argument(attr) is not None:
            raise r.error(
                entry.key_line,
                f"attribute {attr!r} of {what} has the name of a signature argument",
                "attribute names distinct from arguments",
            )
        type_ = r.type_(entry.value, f"type of {what}.reads.{attr}")
        if type_.has_tensor_list:
            raise r.error(
                entry.value.line,
                f"type of {what}.reads.{attr} is {type_}",
                "a Tensor, int, float, bool or str attribute (a layer holds no Tensor[] the "
                "torch.library wrappers could pass)",
            )
        attrs.append(m.Attr(attr, type_))
    return tuple(attrs)


def check_targets(r: Reader, ops: tuple[m.Op, ...]) -> None:
    """One op per vLLM class and per vLLM function; OOT modules with distinct names."""
    by_cls: dict[str, m.Op] = {}
    by_module: dict[str, tuple[m.Layer, m.Op]] = {}
    by_function: dict[str, m.Op] = {}
    by_method: dict[str, m.Op] = {}
    for op in ops:
        if op.collective is not None:
            other = by_method.get(op.collective)
            if other is not None:
                raise r.error(
                    op.line,
                    f"op {op.name!r} replaces the communicator's {op.collective}, already "
                    f"replaced by op {other.name!r} (line {other.line})",
                    "one op per communicator method",
                )
            by_method[op.collective] = op
        if op.function is not None:
            other = by_function.get(op.function.path)
            if other is not None:
                raise r.error(
                    op.line,
                    f"op {op.name!r} replaces {op.function.path}, already "
                    f"replaced by op {other.name!r} (line {other.line})",
                    "one op per vLLM function",
                )
            by_function[op.function.path] = op
        for cls in op.classes:
            line = cls.line if isinstance(cls, m.Subclass) else op.line
            other = by_cls.get(cls.cls)
            if other is not None and other is not op:
                raise r.error(
                    line,
                    f"op {op.name!r} replaces {cls.cls}, already "
                    f"replaced by op {other.name!r} (line {other.line})",
                    "one op per vLLM class (vLLM replaces classes by name)",
                )
            by_cls[cls.cls] = op
            seen = by_module.get(cls.short_module)
            if seen is not None and seen[0].module != cls.module:
                first, owner = seen
                raise r.error(
                    line,
                    f"{'subclass' if isinstance(cls, m.Subclass) else 'layer'} module {cls.module} of op "
                    f"{op.name!r} ends like {first.module} (op {owner.name!r})",
                    "vLLM modules with distinct last names",
                )
            by_module[cls.short_module] = (cls, op)

"""What an op replaces in vLLM: a ``layer`` (a CustomOp class, with the attributes its impls
``reads``), a ``function`` vLLM calls or a ``collective`` (a method of vLLM's device
communicator); and the check that no two ops replace the same one."""

from __future__ import annotations

from .. import model as m
from .reader import Reader
from ..signature import FunctionSchema
from ..yamlnodes import Node

#: names the generated code itself uses next to signature arguments and layer attributes
RESERVED = ("self", "layer", "torch", "out")


def read_layer(r: Reader, node: Node, what: str) -> m.Layer:
    return m.Layer(
        *r.import_path(node, f"layer of {what}", "vllm.model_executor.layers.layernorm.RMSNorm")
    )


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
        attrs.append(m.Attr(attr, r.type_(entry.value, f"type of {what}.reads.{attr}")))
    return tuple(attrs)


def check_targets(r: Reader, ops: tuple[m.Op, ...]) -> None:
    """One op per vLLM class and per vLLM function; OOT modules with distinct names."""
    by_cls: dict[str, m.Op] = {}
    by_module: dict[str, m.Op] = {}
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
        if op.layer is None:
            continue
        other = by_cls.get(op.layer.cls)
        if other is not None:
            raise r.error(
                op.line,
                f"op {op.name!r} replaces {op.layer.cls}, already "
                f"replaced by op {other.name!r} (line {other.line})",
                "one op per vLLM class",
            )
        by_cls[op.layer.cls] = op
        other = by_module.get(op.layer.short_module)
        if other is not None and other.layer is not None and other.layer.module != op.layer.module:
            raise r.error(
                op.line,
                f"layer module {op.layer.module} of op {op.name!r} "
                f"ends like {other.layer.module} (op {other.name!r})",
                "vLLM modules with distinct last names",
            )
        by_module[op.layer.short_module] = op

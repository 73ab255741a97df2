"""One entry of ``ops:``: its signature and doc, what it replaces, its argument lists, impls and
tests, read in that order; then the checks that need the whole op (a reference impl where tests
or an opaque backend need one)."""

from __future__ import annotations

import dataclasses
import keyword
import re

from .. import model as m
from .arguments import check_mutates, read_bounds, read_cache, read_tensor_args
from .impls import read_impls
from .reader import Reader
from .targets import (
    RESERVED,
    check_collective_tests,
    check_no_per_rank,
    check_no_tensor_list,
    check_tested_collective,
    read_collective,
    read_function,
    read_layer,
    read_reads,
    read_subclasses,
)
from .tests import read_tests
from ..signature import FunctionSchema, SignatureError
from ..yamlnodes import Entry, Node

KEYS = (
    "signature",
    "doc",
    "layer",
    "layer_optional",
    "subclasses",
    "function",
    "collective",
    "reads",
    "inplace",
    "mutates",
    "cache",
    "bounds",
    "impls",
    "tests",
)
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def read_op(
    r: Reader, entry: Entry, backends: dict[str, m.Backend], tolerances: dict[str, m.Tolerance]
) -> m.Op:
    name = r.key_ident(entry, "op name")
    what = f"op {name!r}"
    f = r.fields(entry.value, what, "a mapping with signature, doc, impls, ...", KEYS)
    sig_node = f.require("signature", f"{name}(Tensor x, ...) -> Tensor").value
    schema = read_signature(r, sig_node, name)
    doc = _doc(r, f.require("doc", "a one-paragraph description").value, what)
    layer_entry = f.pop("layer")
    layer = read_layer(r, layer_entry.value, what) if layer_entry else None
    optional_entry = f.pop("layer_optional")
    if optional_entry is not None:
        if layer is None:
            raise r.error(
                optional_entry.key_line,
                f"{what} has 'layer_optional' but no 'layer'",
                "'layer_optional' only for ops with a layer",
            )
        if r.boolean(optional_entry.value, f"layer_optional of {what}"):
            layer = dataclasses.replace(layer, optional=True)
    subclasses_entry = f.pop("subclasses")
    subclasses: tuple[m.Subclass, ...] = ()
    if subclasses_entry is not None:
        if layer is None:
            raise r.error(
                subclasses_entry.key_line,
                f"{what} has 'subclasses' but no 'layer'",
                "'subclasses' only for ops with a layer (subclasses of it)",
            )
        subclasses = read_subclasses(r, subclasses_entry.value, what, layer)
    function_entry = f.pop("function")
    function = read_function(r, function_entry.value, what) if function_entry else None
    if function_entry is not None and layer is not None:
        raise r.error(
            function_entry.key_line,
            f"{what} has both 'layer' and 'function'",
            "'layer' for a vLLM CustomOp class, 'function' for a function vLLM calls",
        )
    collective_entry = f.pop("collective")
    collective = read_collective(r, collective_entry.value, what) if collective_entry else None
    if collective is None:
        check_no_tensor_list(r, what, schema, sig_node.line)
    if collective_entry is not None and (layer is not None or function is not None):
        raise r.error(
            collective_entry.key_line,
            f"{what} has 'collective' and also '{'layer' if layer else 'function'}'",
            "'collective' alone: the method of vLLM's device communicator the op replaces",
        )
    reads_entry = f.pop("reads")
    reads: tuple[m.Attr, ...] = ()
    if reads_entry is not None:
        if layer is None:
            raise r.error(
                reads_entry.key_line,
                f"{what} has 'reads' but no 'layer'",
                "'reads' only for ops with a layer",
            )
        reads = read_reads(r, reads_entry.value, what, schema)
    inplace_entry = f.pop("inplace")
    inplace = (
        read_tensor_args(r, inplace_entry.value, f"inplace of {what}", schema)
        if inplace_entry
        else ()
    )
    mutates_entry = f.pop("mutates")
    mutates = (
        read_tensor_args(r, mutates_entry.value, f"mutates of {what}", schema)
        if mutates_entry
        else ()
    )
    check_mutates(r, what, schema, mutates, sig_node.line, inplace_entry, collective is not None)
    cache_entry = f.pop("cache")
    cache = read_cache(r, cache_entry, what, schema, mutates) if cache_entry else None
    bounds_entry = f.pop("bounds")
    bounds = read_bounds(r, bounds_entry.value, f"bounds of {what}", schema) if bounds_entry else ()
    impls_entry = f.require("impls", "a mapping of backend -> module.function")
    impls = read_impls(r, impls_entry, what, backends, inplace, schema)
    tests_entry = f.pop("tests")
    if tests_entry is not None and collective is not None:
        check_tested_collective(r, tests_entry, what, collective)
    tests = (
        read_tests(r, tests_entry.value, what, schema, layer, tolerances) if tests_entry else None
    )
    if (
        tests is not None
        and tests.canonical is not None
        and not (mutates or schema.returns.all_tensors)
    ):
        raise r.error(
            tests_entry.key_line,
            f"tests of {what} name a 'canonical' form but the op returns {schema.returns}",
            "'canonical' only for ops that return tensors or write into mutates arguments",
        )
    if (
        tests is not None
        and tests.round_trip is not None
        and not (mutates or schema.returns.all_tensors)
    ):
        raise r.error(
            tests.round_trip.line,
            f"tests of {what} have a round_trip but the op returns {schema.returns}",
            "'round_trip' only for ops that return tensors or write into mutates arguments",
        )
    if tests is not None and collective is not None:
        assert tests_entry is not None
        check_collective_tests(r, tests_entry, what, tests)
    if collective is None and tests is not None:
        check_no_per_rank(r, what, tests)
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
        cache=cache,
        bounds=bounds,
        collective=collective,
        subclasses=subclasses,
    )
    _check_reference(r, op, backends, sig_node.line, tests_entry)
    return op


def read_signature(r: Reader, node: Node, name: str) -> FunctionSchema:
    """``name(Type arg, ...) -> Return``, parsed; argument names that generated code uses are
    refused."""
    expected = f"{name}(Type arg, Type? arg=default, ...) -> Return"
    text = r.string(node, f"signature of op {name!r}", expected)
    try:
        schema = FunctionSchema.parse(" ".join(text.split()))
    except SignatureError as exc:
        raise r.error(node.line, f"bad signature of op {name!r}: {exc}", expected) from None
    for arg in schema.arguments:
        if keyword.iskeyword(arg.name) or arg.name in RESERVED or arg.name.startswith("_"):
            raise r.error(
                node.line,
                f"argument {arg.name!r} of op {name!r} is a reserved name",
                "a name that is no keyword, not one of "
                + ", ".join(RESERVED)
                + " and not starting with _",
            )
    if schema.name != name:
        raise r.error(
            node.line,
            f"signature names {schema.name!r} under op {name!r}",
            f"a signature starting with {name}(",
        )
    return schema


def _doc(r: Reader, node: Node, what: str) -> str:
    doc = r.string(node, f"doc of {what}")
    if CONTROL.search(doc):
        raise r.error(node.line, f"doc of {what} contains a control character", "printable text")
    return doc


def _check_reference(
    r: Reader, op: m.Op, backends: dict[str, m.Backend], sig_line: int, tests_entry: Entry | None
) -> None:
    """Tests compare with the reference impl, and an opaque backend's custom op runs it as its
    fake: either needs one; an opaque custom op also needs return forms it can decode."""
    reference = next((b for b in backends.values() if b.kind == "reference"), None)
    ref_impl = op.impl(reference.name) if reference else None
    if tests_entry is not None and ref_impl is None:
        raise r.error(
            tests_entry.key_line,
            f"op {op.name!r} has tests but no reference impl to compare with",
            "an impls entry for the reference backend",
        )
    for impl in op.impls:
        backend = backends[impl.backend]
        if not (backend.opaque and op.opaque_ok):
            continue
        if ref_impl is None:
            raise r.error(
                impl.line,
                f"op {op.name!r} is implemented by opaque backend "
                f"{backend.name!r} but has no reference impl for the custom op's fake",
                "an impls entry for the reference backend",
            )
        if not op.schema.returns.is_single_tensor:
            try:
                op.schema.returns.tensor_list_decoding()
            except SignatureError as exc:
                raise r.error(
                    sig_line,
                    f"op {op.name!r} cannot be wrapped as a custom op "
                    f"for opaque backend {backend.name!r}: {exc}",
                    "return forms that differ in their number of tensors",
                ) from None

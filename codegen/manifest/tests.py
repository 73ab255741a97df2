"""An op's ``tests:``: dtypes, cases (constructor arguments and inputs), tolerances and the
optional canonical form of the outputs."""

from __future__ import annotations

from .. import model as m
from .reader import Reader
from .tolerances import read_tolerances
from ..signature import FunctionSchema, Type
from ..yamlnodes import Map, Node, Seq, describe

KEYS = ("dtypes", "cases", "tolerances", "canonical")
CASE_KEYS = ("init", "inputs")
TENSOR_KEYS = ("shape", "dtype", "high", "scale", "values")
#: the most elements a tensor given by its ``values`` may have (a test's metadata, not its data)
MAX_VALUES = 4096
#: the values an integer dtype holds
INT_RANGES = {
    "int64": (-(2**63), 2**63 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int8": (-128, 127),
    "uint8": (0, 255),
}


def read_tests(
    r: Reader,
    node: Node,
    what: str,
    schema: FunctionSchema,
    layer: m.Layer | None,
    tolerances: dict[str, m.Tolerance],
) -> m.Tests:
    """The tests of op ``what``; every dtype gets its tolerance (the op's own or the top level)."""
    sub = f"tests of {what}"
    f = r.fields(node, sub, "a mapping with dtypes and cases", KEYS)
    dtypes_node = r.seq(
        f.require("dtypes", "[float32, float16, bfloat16]").value,
        f"dtypes of {what}",
        "a list like [float32, float16, bfloat16]",
    )
    dtypes = []
    for item in dtypes_node.items:
        dtype = r.scalar(item, f"dtype in {sub}", (str,), "one of " + ", ".join(m.DTYPES))
        if dtype not in m.DTYPES:
            raise r.error(
                item.line, f"unknown dtype {dtype!r} in {sub}", "one of " + ", ".join(m.DTYPES)
            )
        if dtype in dtypes:
            raise r.error(item.line, f"dtype {dtype!r} listed twice in {sub}", "each dtype once")
        dtypes.append(str(dtype))
    if not dtypes:
        raise r.error(dtypes_node.line, f"dtypes of {what} is empty", "at least one dtype")
    cases_node = r.seq(
        f.require("cases", "a list of {init, inputs}").value,
        f"cases of {what}",
        "a list of {init: ..., inputs: ...}",
    )
    if not cases_node.items:
        raise r.error(cases_node.line, f"cases of {what} is empty", "at least one case")
    cases = tuple(_case(r, c, what, schema, layer) for c in cases_node.items)
    tol_entry = f.pop("tolerances")
    own = dict(read_tolerances(r, tol_entry.value, f"tolerances of {what}")) if tol_entry else {}
    canonical_entry = f.pop("canonical")
    canonical = None
    if canonical_entry is not None:
        canonical = r.fn_ref(
            canonical_entry.value,
            f"canonical of {sub}",
            "module.function under the reference backend's impl/ package",
        )
    f.done()
    resolved = []
    for dtype in dtypes:
        tol = own.get(dtype) or tolerances.get(dtype)
        if tol is None:
            raise r.error(
                dtypes_node.line,
                f"dtype {dtype!r} of {what} has no tolerance",
                f"{dtype} in the top-level tolerances or in the op's tests",
            )
        resolved.append((dtype, tol))
    return m.Tests(tuple(dtypes), cases, tuple(resolved), node.line, canonical)


def _case(
    r: Reader, node: Node, what: str, schema: FunctionSchema, layer: m.Layer | None
) -> m.Case:
    sub = f"test case of {what}"
    f = r.fields(node, sub, "a mapping with inputs (and init)", CASE_KEYS)
    init_entry = f.pop("init")
    init: list[tuple[str, object]] = []
    if init_entry is not None:
        if layer is None:
            raise r.error(
                init_entry.key_line,
                f"{sub} has 'init' but the op has no layer",
                "'init' only for ops with a layer",
            )
        table = r.map(init_entry.value, f"init of {sub}", "a mapping of argument -> value")
        for entry in table.entries.values():
            key = r.key_ident(entry, f"init argument of {sub}")
            init.append((key, r.literal(entry.value, f"init argument {key!r} of {sub}")))
    inputs_entry = f.require("inputs", "a mapping of argument -> shape")
    table = r.map(inputs_entry.value, f"inputs of {sub}", "a mapping of argument -> shape")
    given: dict[str, m.TensorInput | m.LiteralInput] = {}
    for entry in table.entries.values():
        arg = schema.argument(entry.key)
        if arg is None:
            raise r.error(
                entry.key_line,
                f"input {entry.key!r} of {sub} is not an argument",
                "one of " + ", ".join(schema.arg_names),
            )
        given[entry.key] = _input(r, entry.value, f"input {entry.key!r} of {sub}", arg.type)
    for arg in schema.arguments:
        if arg.name not in given and not arg.has_default:
            raise r.error(
                inputs_entry.value.line,
                f"inputs of {sub} lack required argument {arg.name!r}",
                f"a value for {arg.name}",
            )
    f.done()
    ordered = tuple((a.name, given[a.name]) for a in schema.arguments if a.name in given)
    return m.Case(tuple(init), ordered, node.line)


def _shape(r: Reader, node: Node, what: str) -> tuple[int, ...]:
    items = r.seq(node, f"shape of {what}", "a list of positive integers like [7, 256]")
    dims = []
    for item in items.items:
        dim = r.scalar(item, f"dimension in {what}", (int,), "a positive integer")
        assert isinstance(dim, int)
        if dim <= 0 or dim > 1 << 20:
            raise r.error(
                item.line, f"dimension {dim} in {what}", "a positive integer up to 1048576"
            )
        dims.append(dim)
    if not dims:
        raise r.error(items.line, f"shape of {what} is empty", "at least one dimension")
    return tuple(dims)


def _input(r: Reader, node: Node, what: str, type_: Type) -> m.TensorInput | m.LiteralInput:
    if not type_.is_tensor:
        value = r.literal(node, what)
        if not type_.accepts(value):
            raise r.error(node.line, f"{what} is {describe(node)}", f"a {type_} literal")
        return m.LiteralInput(value)
    if isinstance(node, Seq):
        return m.TensorInput(_shape(r, node, what), m.DTYPE_PLACEHOLDER, None)
    if isinstance(node, Map):
        return _tensor(r, node, what)
    value = r.literal(node, what)
    if value is None and type_.optional:
        return m.LiteralInput(None)
    raise r.error(
        node.line,
        f"{what} is {describe(node)}",
        "a shape like [7, 256], {shape: ..., dtype: ..., high: ...}"
        + (" or null" if type_.optional else ""),
    )


def _tensor(r: Reader, node: Map, what: str) -> m.TensorInput:
    """The long form of a tensor input: ``{shape, dtype, high, scale}`` or ``{values, dtype}``."""
    f = r.fields(node, what, "a mapping", TENSOR_KEYS)
    dtype = _dtype(r, f, what)
    values_entry = f.pop("values")
    if values_entry is not None:
        for key in ("shape", "high", "scale"):
            extra = f.pop(key)
            if extra is not None:
                raise r.error(
                    extra.key_line,
                    f"{what} has both 'values' and '{key}'",
                    "values: [...] with an optional dtype, nothing else",
                )
        f.done()
        shape, values = _values(r, values_entry.value, what, dtype)
        return m.TensorInput(shape, dtype, None, values=values)
    shape = _shape(r, f.require("shape", "[dims...] (or values: [...])").value, what)
    high_entry = f.pop("high")
    high = r.integer(high_entry.value, f"high of {what}") if high_entry else None
    scale_entry = f.pop("scale")
    scale = r.number(scale_entry.value, f"scale of {what}") if scale_entry else None
    f.done()
    if scale_entry is not None and scale is not None and not (0 < scale < 1e6):
        raise r.error(
            scale_entry.value.line,
            f"scale of {what} is {scale!r}",
            "a finite number above 0 (the standard deviation of the random values)",
        )
    if scale_entry is not None and dtype in m.INT_DTYPES:
        raise r.error(
            scale_entry.key_line,
            f"integer tensor {what} has 'scale'",
            "'scale' only with a floating-point dtype",
        )
    if dtype in m.INT_DTYPES and (high is None or high <= 0):
        raise r.error(
            node.line,
            f"integer tensor {what} has no positive 'high'",
            "high: N (values are drawn from [0, N))",
        )
    if dtype not in m.INT_DTYPES and high_entry is not None:
        raise r.error(
            high_entry.key_line,
            f"floating-point tensor {what} has 'high'",
            "'high' only with an integer dtype",
        )
    return m.TensorInput(shape, dtype, high, scale)


def _dtype(r: Reader, f, what: str) -> str:
    dtype_entry = f.pop("dtype")
    if dtype_entry is None:
        return m.DTYPE_PLACEHOLDER
    allowed = (m.DTYPE_PLACEHOLDER,) + m.DTYPES + m.INT_DTYPES
    dtype = str(
        r.scalar(dtype_entry.value, f"dtype of {what}", (str,), "one of " + ", ".join(allowed))
    )
    if dtype not in allowed:
        raise r.error(
            dtype_entry.value.line,
            f"dtype of {what} is {dtype!r}",
            "one of " + ", ".join(allowed),
        )
    return dtype


def _values(r: Reader, node: Node, what: str, dtype: str) -> tuple[tuple[int, ...], tuple]:
    """The explicit elements of a tensor input: a list of numbers, or a rectangular list of such
    lists; returns (shape, the values as nested tuples)."""
    expected = "a list of numbers like [0, 5, 17], or of equal-length lists of them"
    count = [0]

    def read(item: Node, depth: int) -> tuple[tuple[int, ...], object]:
        if isinstance(item, Seq):
            if depth >= 8 or not item.items:
                raise r.error(
                    item.line, f"values of {what} hold an empty or too deeply nested list", expected
                )
            parts = [read(sub, depth + 1) for sub in item.items]
            shapes = {shape for shape, _ in parts}
            if len(shapes) != 1:
                raise r.error(item.line, f"values of {what} are not rectangular", expected)
            return (len(parts),) + shapes.pop(), tuple(v for _, v in parts)
        value = _element(r, item, what, dtype)
        count[0] += 1
        if count[0] > MAX_VALUES:
            raise r.error(item.line, f"values of {what} hold over {MAX_VALUES} numbers", expected)
        return (), value

    if not isinstance(node, Seq):
        raise r.error(node.line, f"values of {what} is {describe(node)}", expected)
    shape, values = read(node, 0)
    assert isinstance(values, tuple)
    return shape, values


def _element(r: Reader, node: Node, what: str, dtype: str) -> int | float:
    if dtype in m.INT_DTYPES:
        low, high = INT_RANGES[dtype]
        value = r.scalar(node, f"a value of {what}", (int,), f"an integer in [{low}, {high}]")
        assert isinstance(value, int)
        if not low <= value <= high:
            raise r.error(
                node.line, f"a value of {what} is {value}", f"an integer in [{low}, {high}]"
            )
        return value
    value = r.scalar(node, f"a value of {what}", (int, float), "a finite number")
    assert isinstance(value, (int, float))
    return float(value)

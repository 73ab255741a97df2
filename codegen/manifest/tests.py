"""An op's ``tests:``: dtypes, cases (constructor arguments and inputs), tolerances, the
optional canonical form of the outputs and the optional round trip of a quantized op."""

from __future__ import annotations

from .. import model as m
from .reader import Reader
from .tolerances import read_tolerances
from ..signature import FunctionSchema, Type, TypeUnion
from ..yamlnodes import Entry, Map, Node, Scalar, Seq, describe

KEYS = ("dtypes", "cases", "tolerances", "canonical", "round_trip")
CASE_KEYS = ("init", "inputs")
TENSOR_KEYS = ("shape", "dtype", "high", "scale", "values")
QUANTIZED_KEYS = ("quantize", "scheme", "group", "scales", "zeros", "transpose", "scale")
DERIVED_KEYS = ("derive",)
PER_RANK_KEYS = ("per_rank",)
#: the most tensors a Tensor[] input may hold
MAX_TENSORS = 64
ROUND_TRIP_KEYS = ("fn", "tolerances")
REFERENCE_FN = "module.function under the reference backend's impl/ package"
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
        canonical = r.fn_ref(canonical_entry.value, f"canonical of {sub}", REFERENCE_FN)
    round_trip_entry = f.pop("round_trip")
    round_trip = None
    if round_trip_entry is not None:
        round_trip = _round_trip(r, round_trip_entry, what, dtypes, cases)
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
    return m.Tests(tuple(dtypes), cases, tuple(resolved), node.line, canonical, round_trip)


def _round_trip(
    r: Reader, entry: Entry, what: str, dtypes: list[str], cases: tuple[m.Case, ...]
) -> m.RoundTrip:
    """``round_trip: {fn, tolerances}``: a tolerance for each of the op's dtypes, and a case
    with a quantized input to run it on."""
    sub = f"round_trip of {what}"
    f = r.fields(
        entry.value,
        sub,
        "{fn: module.function, tolerances: {dtype: {atol, rtol}}}",
        ROUND_TRIP_KEYS,
    )
    fn = r.fn_ref(f.require("fn", REFERENCE_FN).value, f"fn of {sub}", REFERENCE_FN)
    tol_entry = f.require("tolerances", "{dtype: {atol: <number>, rtol: <number>}}")
    own = dict(read_tolerances(r, tol_entry.value, f"tolerances of {sub}"))
    f.done()
    for dtype in own:
        if dtype not in dtypes:
            raise r.error(
                tol_entry.value.entries[dtype].key_line,
                f"tolerances of {sub} name dtype {dtype!r}, which the op is not tested in",
                "one of the op's dtypes: " + ", ".join(dtypes),
            )
    missing = [dtype for dtype in dtypes if dtype not in own]
    if missing:
        raise r.error(
            tol_entry.value.line,
            f"tolerances of {sub} lack dtype {missing[0]!r}",
            "a tolerance for each of the op's dtypes: " + ", ".join(dtypes),
        )
    if not any(case.quantized for case in cases):
        raise r.error(
            entry.key_line,
            f"{what} has a round_trip but no case with a quantized input",
            "a case input like {quantize: [M, K], scheme: int8_token, scales: <argument>}",
        )
    return m.RoundTrip(fn, tuple((d, own[d]) for d in dtypes), entry.key_line)


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
    given: dict[str, m.Input] = {}
    for entry in table.entries.values():
        arg = schema.argument(entry.key)
        if arg is None:
            raise r.error(
                entry.key_line,
                f"input {entry.key!r} of {sub} is not an argument",
                "one of " + ", ".join(schema.arg_names),
            )
        given[entry.key] = _input(r, entry.value, f"input {entry.key!r} of {sub}", arg.type)
    assigned = _check_assigned(r, table, given, sub, schema)
    for arg in schema.arguments:
        if arg.name not in given and arg.name not in assigned and not arg.has_default:
            raise r.error(
                inputs_entry.value.line,
                f"inputs of {sub} lack required argument {arg.name!r}",
                f"a value for {arg.name}",
            )
    f.done()
    ordered = tuple((a.name, given[a.name]) for a in schema.arguments if a.name in given)
    return m.Case(tuple(init), ordered, node.line)


def _check_assigned(
    r: Reader, table: Map, given: dict[str, m.Input], sub: str, schema: FunctionSchema
) -> set[str]:
    """The arguments quantized inputs assign (``scales``, ``zeros``): Tensor arguments of the
    signature, none the input itself or one the case sets, each assigned once."""
    assigned: set[str] = set()
    for name, spec in given.items():
        if not isinstance(spec, m.QuantizedInput):
            continue
        fields = table.entries[name].value
        assert isinstance(fields, Map)
        for key, target in (("scales", spec.scales), ("zeros", spec.zeros)):
            if target is None:
                continue
            line = fields.entries[key].value.line
            what = f"{key} of input {name!r} of {sub}"
            arg = schema.argument(target)
            if arg is None or not arg.type.is_tensor:
                tensors = [a.name for a in schema.arguments if a.type.is_tensor]
                found = "not an argument" if arg is None else f"an argument of type {arg.type}"
                raise r.error(
                    line,
                    f"{what} names {target!r}, {found}",
                    "a Tensor argument of the signature: " + ", ".join(tensors),
                )
            if target == name:
                raise r.error(
                    line,
                    f"{what} names the input itself",
                    "another Tensor argument, which gets the " + key,
                )
            if target in given:
                raise r.error(
                    line,
                    f"{what} names {target!r}, which the case also sets",
                    f"an argument the case leaves to the quantized input (drop {target} from "
                    "its inputs)",
                )
            if target in assigned:
                raise r.error(
                    line,
                    f"{what} names {target!r}, already assigned by another quantized input",
                    "each argument assigned once in a case",
                )
            assigned.add(target)
    return assigned


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


def _input(r: Reader, node: Node, what: str, type_: Type | TypeUnion) -> m.Input:
    if isinstance(node, Map) and "per_rank" in node.entries:
        return _per_rank(r, node, what, type_)
    if isinstance(type_, TypeUnion):
        return _input(r, node, what, _alternative(r, node, what, type_))
    if type_.base == "Tensor[]":
        return _tensor_list(r, node, what)
    if type_.base == "int[]":
        return _int_list(r, node, what, type_)
    if not type_.is_tensor:
        value = r.literal(node, what)
        if not type_.accepts(value):
            raise r.error(node.line, f"{what} is {describe(node)}", f"a {type_} literal")
        return m.LiteralInput(value)
    if isinstance(node, Seq):
        return m.TensorInput(_shape(r, node, what), m.DTYPE_PLACEHOLDER, None)
    if isinstance(node, Map):
        if "quantize" in node.entries:
            return _quantized(r, node, what)
        if "derive" in node.entries:
            f = r.fields(node, what, "{derive: module.function}", DERIVED_KEYS)
            module, function = r.fn_ref(
                f.require("derive", REFERENCE_FN).value, f"derive of {what}", REFERENCE_FN
            )
            f.done()
            return m.DerivedInput(module, function)
        return _tensor(r, node, what)
    value = r.literal(node, what)
    if value is None and type_.optional:
        return m.LiteralInput(None)
    raise r.error(
        node.line,
        f"{what} is {describe(node)}",
        "a shape like [7, 256], {shape: ..., dtype: ..., high: ...}, {values: [...]}, "
        "{quantize: ..., scheme: ..., scales: ...}, {derive: module.function}"
        + (" or null" if type_.optional else ""),
    )


#: how an input of each type is written, in an error about a union's input
_FORMS = {
    "Tensor": "a shape like [7, 256] or {shape: ...}",
    "Tensor[]": "a list of shapes like [[7, 256], [7]]",
    "int[]": "a list of integers like [3, 2]",
}


def _alternative(r: Reader, node: Node, what: str, union: TypeUnion) -> Type:
    """The type of a union argument's input, by the input's form, in the union's order: a list of
    lists or mappings is a ``Tensor[]``, another list a ``Tensor`` shape or an ``int[]``, a
    mapping a ``Tensor``, a scalar a literal of a scalar type."""
    for type_ in union.types:
        if isinstance(node, Seq) and node.items and isinstance(node.items[0], (Seq, Map)):
            fits = type_.base == "Tensor[]"
        elif isinstance(node, Seq):
            fits = type_.base in ("Tensor", "int[]")
        elif isinstance(node, Map):
            fits = type_.base == "Tensor"
        else:
            fits = type_.base not in _FORMS and type_.base != "ScalarType"
        if fits:
            return type_
    forms = [_FORMS.get(t.base, f"a {t} literal") for t in union.types]
    raise r.error(node.line, f"{what} is {describe(node)}", " or ".join(forms))


def _tensor_list(r: Reader, node: Node, what: str) -> m.TensorListInput:
    """A ``Tensor[]`` input: a list of tensor inputs (shapes or ``{shape, dtype, ...}``)."""
    expected = "a list of tensor inputs like [[7, 256], {shape: [7], dtype: int32, high: 8}]"
    items = r.seq(node, what, expected)
    if not items.items or len(items.items) > MAX_TENSORS:
        raise r.error(
            items.line,
            f"{what} holds {len(items.items)} tensors",
            f"{expected}, 1 to {MAX_TENSORS} of them",
        )
    out = []
    for i, item in enumerate(items.items):
        sub = f"tensor {i} of {what}"
        if isinstance(item, Seq):
            out.append(m.TensorInput(_shape(r, item, sub), m.DTYPE_PLACEHOLDER, None))
        elif isinstance(item, Map):
            out.append(_tensor(r, item, sub))
        else:
            raise r.error(item.line, f"{sub} is {describe(item)}", expected)
    return m.TensorListInput(tuple(out))


def _per_rank(r: Reader, node: Map, what: str, type_: Type | TypeUnion) -> m.PerRankInput:
    """``{per_rank: [rank 0's input, rank 1's, ...]}``: one input of the argument's type per rank
    of the collectives' tests (whether the op is a collective is checked with the op)."""
    world = m.COLLECTIVE_WORLD_SIZE
    expected = f"{{per_rank: [...]}} with one input per rank ({world} ranks)"
    f = r.fields(node, what, expected, PER_RANK_KEYS)
    items = r.seq(f.require("per_rank", expected).value, f"per_rank of {what}", expected)
    f.done()
    if len(items.items) != world:
        raise r.error(items.line, f"per_rank of {what} gives {len(items.items)} input(s)", expected)
    ranks = []
    for rank, item in enumerate(items.items):
        sub = f"rank {rank}'s {what}"
        if isinstance(item, Map) and "per_rank" in item.entries:
            raise r.error(item.line, f"{sub} is per_rank again", "the input of one rank")
        spec = _input(r, item, sub, type_)
        if not isinstance(spec, (m.TensorInput, m.LiteralInput, m.TensorListInput)):
            raise r.error(
                item.line,
                f"{sub} is quantized or derived",
                "a shape, {shape: ..., dtype: ...}, {values: [...]}, a list of them or a literal",
            )
        ranks.append(spec)
    return m.PerRankInput(tuple(ranks))


def _int_list(r: Reader, node: Node, what: str, type_: Type) -> m.LiteralInput:
    """The literal of an ``int[]`` argument: a YAML list of integers (null for ``int[]?``)."""
    expected = "a list of integers like [3, 2]" + (" or null" if type_.optional else "")
    if not isinstance(node, Seq):
        if type_.optional and isinstance(node, Scalar) and node.value is None:
            return m.LiteralInput(None)
        raise r.error(node.line, f"{what} is {describe(node)}", expected)
    values = [r.scalar(item, f"an element of {what}", (int,), expected) for item in node.items]
    return m.LiteralInput(tuple(values))


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
        if dtype in m.FLOAT8_DTYPES:
            raise r.error(
                values_entry.key_line,
                f"{what} gives values in {dtype}",
                "values of an integer, floating-point or $dtype tensor",
            )
        shape, values = _values(r, values_entry.value, what, dtype)
        return m.TensorInput(shape, dtype, None, values=values)
    shape = _shape(r, f.require("shape", "[dims...] (or values: [...])").value, what)
    high_entry = f.pop("high")
    high = r.integer(high_entry.value, f"high of {what}") if high_entry else None
    scale_entry = f.pop("scale")
    scale = _scale(r, scale_entry, what)
    f.done()
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
    allowed = (m.DTYPE_PLACEHOLDER,) + m.DTYPES + m.FLOAT8_DTYPES + m.INT_DTYPES
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


def _scale(r: Reader, entry: Entry | None, what: str) -> float | None:
    """``scale:``, the standard deviation of a tensor's random values (None: not given)."""
    if entry is None:
        return None
    scale = r.number(entry.value, f"scale of {what}")
    if not (0 < scale < 1e6):
        raise r.error(
            entry.value.line,
            f"scale of {what} is {scale!r}",
            "a finite number above 0 (the standard deviation of the random values)",
        )
    return scale


def _quantized(r: Reader, node: Map, what: str) -> m.QuantizedInput:
    """``{quantize: [shape], scheme, group, scales, zeros, transpose, scale}``: a normal float32
    tensor quantised with a scheme of ``vllm_fl.testing.quantize``. Which arguments ``scales``
    and ``zeros`` may name is checked with the case (``_check_assigned``)."""
    f = r.fields(node, what, "a mapping", QUANTIZED_KEYS)
    shape = _shape(r, f.require("quantize", "[dims...]").value, what)
    schemes = ", ".join(m.QUANT_SCHEMES)
    scheme_node = f.require("scheme", "one of " + schemes).value
    scheme = str(r.scalar(scheme_node, f"scheme of {what}", (str,), "one of " + schemes))
    rules = m.QUANT_SCHEMES.get(scheme)
    if rules is None:
        raise r.error(scheme_node.line, f"scheme of {what} is {scheme!r}", "one of " + schemes)
    if rules.ranks and len(shape) not in rules.ranks:
        raise r.error(
            node.entries["quantize"].value.line,
            f"{what} has shape {list(shape)}, which scheme {scheme!r} does not quantise",
            f"a shape {rules.shapes}",
        )
    group = _group(r, f.pop("group"), node, what, scheme, rules)
    scales = r.ident(
        f.require("scales", "the Tensor argument that gets the scales").value, f"scales of {what}"
    )
    zeros_entry = f.pop("zeros")
    if rules.zeros and zeros_entry is None:
        raise r.error(
            node.line,
            f"{what} has no 'zeros', which scheme {scheme!r} makes",
            "zeros: the Tensor argument that gets the zero points",
        )
    if not rules.zeros and zeros_entry is not None:
        raise r.error(
            zeros_entry.key_line,
            f"{what} has 'zeros' but scheme {scheme!r} is symmetric",
            "'zeros' only with a scheme that makes zero points: "
            + ", ".join(name for name, s in m.QUANT_SCHEMES.items() if s.zeros),
        )
    zeros = r.ident(zeros_entry.value, f"zeros of {what}") if zeros_entry else None
    transpose_entry = f.pop("transpose")
    transpose = (
        r.boolean(transpose_entry.value, f"transpose of {what}") if transpose_entry else False
    )
    if transpose and len(shape) != 2:
        assert transpose_entry is not None
        raise r.error(
            transpose_entry.value.line,
            f"{what} has transpose: true and shape {list(shape)}",
            "transpose only for a 2-D shape (the quantised tensor's .t())",
        )
    scale = _scale(r, f.pop("scale"), what)
    f.done()
    return m.QuantizedInput(shape, scheme, group, scales, zeros, transpose, scale)


def _group(
    r: Reader, entry: Entry | None, node: Map, what: str, scheme: str, rules: m.QuantScheme
) -> tuple[int, ...] | None:
    """``group:``, given exactly for a scheme that takes one, of its form."""
    if rules.group is None:
        if entry is not None:
            raise r.error(
                entry.key_line,
                f"{what} has 'group' but scheme {scheme!r} takes none",
                "'group' only with "
                + ", ".join(name for name, s in m.QUANT_SCHEMES.items() if s.group is not None),
            )
        return None
    if entry is None:
        raise r.error(
            node.line,
            f"{what} has no 'group', which scheme {scheme!r} needs",
            f"group: {rules.group_form}",
        )
    group = _shape(r, entry.value, f"group of {what}")
    fits = len(group) == len(rules.group) and all(
        want is None or got == want for got, want in zip(group, rules.group)
    )
    if not fits:
        raise r.error(
            entry.value.line,
            f"group of {what} is {list(group)}",
            f"{rules.group_form} for scheme {scheme!r}",
        )
    return group

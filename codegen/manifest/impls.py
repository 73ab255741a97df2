"""An op's ``impls:``: backend -> ``module.function`` under the backend's ``impl/`` package, or
the long form ``{fn, priority, requires, eager, supports}``."""

from __future__ import annotations

from .. import model as m
from ..signature import Argument, FunctionSchema, Type
from .reader import Reader
from ..yamlnodes import Entry, Map, Scalar

KEYS = ("fn", "priority", "requires", "eager", "supports")
SUPPORTS = "a mapping of argument -> the list of values the impl serves, e.g. {activation: [silu]}"
# The Python types a value of each scalar argument type may have in the manifest.
_VALUE_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
}
SHORT = "module.function (e.g. normalization.rms_norm) or {fn: ..., priority: ...}"


def read_impls(
    r: Reader,
    entry: Entry,
    what: str,
    backends: dict[str, m.Backend],
    inplace: tuple[str, ...] = (),
    schema: FunctionSchema | None = None,
) -> tuple[m.Impl, ...]:
    """The impls of op ``what``, in manifest order; each names a declared backend."""
    table = r.map(entry.value, f"impls of {what}", "a mapping of backend -> module.function")
    if not table.entries:
        raise r.error(entry.key_line, f"impls of {what} is empty", "at least one backend")
    result = []
    for item in table.entries.values():
        backend = r.key_ident(item, f"backend in impls of {what}")
        if backend not in backends:
            raise r.error(
                item.key_line,
                f"impls of {what} names undeclared backend {backend!r}",
                "one of " + ", ".join(backends),
            )
        result.append(read_impl(r, item, backend, what, inplace, schema))
    return tuple(result)


def read_impl(
    r: Reader,
    entry: Entry,
    backend: str,
    what: str,
    inplace: tuple[str, ...] = (),
    schema: FunctionSchema | None = None,
) -> m.Impl:
    """One impl of op ``what`` by ``backend``: the short or the long form."""
    sub = f"impl {backend!r} of {what}"
    priority = None
    requires: tuple[str, ...] = ()
    eager: tuple[str, str] | None = None
    supports: tuple[tuple[str, tuple[object, ...]], ...] = ()
    node = entry.value
    if isinstance(node, Map):
        f = r.fields(node, sub, "a mapping", KEYS)
        fn_node = f.require("fn", "module.function").value
        prio = f.pop("priority")
        priority = r.integer(prio.value, f"priority of {sub}") if prio else None
        req = f.pop("requires")
        requires = r.modules(req.value, f"requires of {sub}") if req else ()
        eager_entry = f.pop("eager")
        if eager_entry is not None:
            if not inplace:
                raise r.error(
                    eager_entry.key_line,
                    f"{sub} has an 'eager' variant but {what} declares no 'inplace' arguments",
                    "'eager' only for ops with inplace: [...]",
                )
            eager = r.fn_ref(
                eager_entry.value,
                f"eager variant of {sub}",
                "module.function (e.g. normalization.rms_norm_inplace)",
            )
        supports_entry = f.pop("supports")
        if supports_entry is not None:
            supports = read_supports(r, supports_entry, f"supports of {sub}", schema)
        f.done()
    else:
        fn_node = node
    module, function = r.fn_ref(fn_node, sub, SHORT)
    if eager == (module, function):
        raise r.error(
            fn_node.line,
            f"eager variant of {sub} is the impl itself",
            "a separate in-place function, e.g. normalization.rms_norm_inplace",
        )
    return m.Impl(backend, module, function, priority, requires, entry.key_line, eager, supports)


def read_supports(
    r: Reader, entry: Entry, what: str, schema: FunctionSchema | None
) -> tuple[tuple[str, tuple[object, ...]], ...]:
    """``supports: {argument: [values]}``: the calls an impl serves, by the values of arguments of
    the op's signature; a call passing another value skips the impl. A Tensor argument (optional)
    takes only ``[null]``: the impl serves calls without it."""
    table = r.map(entry.value, what, SUPPORTS)
    if not table.entries:
        raise r.error(entry.key_line, f"{what} is empty", SUPPORTS)
    result = []
    for item in table.entries.values():
        name = r.key_ident(item, f"argument in {what}")
        arg = schema.argument(name) if schema is not None else None
        if arg is None:
            names = ", ".join(schema.arg_names) if schema is not None else ""
            raise r.error(
                item.key_line,
                f"{what} names {name!r}, which is not an argument of the op",
                f"one of {names}" if names else "an argument of the op's signature",
            )
        result.append((name, _supported_values(r, item, f"values of {name!r} in {what}", arg)))
    return tuple(result)


def _supported_values(r: Reader, item: Entry, what: str, arg: Argument) -> tuple[object, ...]:
    if not isinstance(arg.type, Type) or not (arg.type.is_tensor or arg.type.base in _VALUE_TYPES):
        raise r.error(
            item.key_line,
            f"{what}: {arg.name} is a {arg.type}",
            "supports only for optional Tensors (Tensor?) and str, int, float, bool arguments",
        )
    if arg.type.is_tensor:
        expected = f"[null] (a Tensor argument: the impl serves calls without {arg.name})"
        if not arg.type.optional:
            raise r.error(
                item.key_line,
                f"{what}: {arg.name} is a Tensor the op always takes",
                "supports only for optional Tensors (Tensor?) and str, int, float, bool arguments",
            )
    else:
        kind = arg.type.base
        expected = f"a non-empty list of {kind} values" + (" or null" if arg.type.optional else "")
    values = r.seq(item.value, what, expected)
    if not values.items:
        raise r.error(item.value.line, f"{what} is an empty list", expected)
    out: list[object] = []
    for node in values.items:
        value = node.value if isinstance(node, Scalar) else node
        ok = isinstance(node, Scalar) and (
            (value is None and arg.type.optional)
            or (
                not arg.type.is_tensor
                and isinstance(value, _VALUE_TYPES[arg.type.base])
                and (arg.type.base == "bool" or not isinstance(value, bool))
            )
        )
        if not ok:
            raise r.error(node.line, f"{what}: {value!r} is not a value of {arg.type}", expected)
        if any(v == value and type(v) is type(value) for v in out):
            raise r.error(node.line, f"{what}: {value!r} is listed twice", "each value once")
        out.append(value)
    return tuple(out)

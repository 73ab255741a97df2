"""An op's ``impls:``: backend -> ``module.function`` under the backend's ``impl/`` package, or
the long form ``{fn, priority, requires, eager}``."""

from __future__ import annotations

from .. import model as m
from .reader import Reader
from ..yamlnodes import Entry, Map

KEYS = ("fn", "priority", "requires", "eager")
SHORT = "module.function (e.g. normalization.rms_norm) or {fn: ..., priority: ...}"


def read_impls(
    r: Reader,
    entry: Entry,
    what: str,
    backends: dict[str, m.Backend],
    inplace: tuple[str, ...] = (),
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
        result.append(read_impl(r, item, backend, what, inplace))
    return tuple(result)


def read_impl(
    r: Reader, entry: Entry, backend: str, what: str, inplace: tuple[str, ...] = ()
) -> m.Impl:
    """One impl of op ``what`` by ``backend``: the short or the long form."""
    sub = f"impl {backend!r} of {what}"
    priority = None
    requires: tuple[str, ...] = ()
    eager: tuple[str, str] | None = None
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
    return m.Impl(backend, module, function, priority, requires, entry.key_line, eager)

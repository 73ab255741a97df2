"""Per-op lists of signature arguments: ``inplace`` (what an eager variant may overwrite) and
``mutates`` (the caller-provided outputs every impl writes into), and how they combine with the
signature's return."""

from __future__ import annotations

from .reader import Reader
from ..signature import FunctionSchema
from ..yamlnodes import Entry, Node


def read_tensor_args(r: Reader, node: Node, sub: str, schema: FunctionSchema) -> tuple[str, ...]:
    """A non-empty list of distinct Tensor arguments of ``schema`` (``sub`` names the key)."""
    expected = "a list of the signature's Tensor arguments, like [x, residual]"
    items = r.seq(node, sub, expected)
    if not items.items:
        raise r.error(items.line, f"{sub} is empty", expected)
    names: list[str] = []
    for item in items.items:
        name = r.ident(item, f"argument in {sub}")
        arg = schema.argument(name)
        if arg is None:
            raise r.error(
                item.line,
                f"{sub} names {name!r}, which is not an argument",
                "one of " + ", ".join(schema.arg_names),
            )
        if not arg.type.is_tensor:
            raise r.error(
                item.line, f"{sub} names {name!r} of type {arg.type}", "Tensor arguments only"
            )
        if name in names:
            raise r.error(item.line, f"{sub} lists {name!r} twice", "each argument once")
        names.append(name)
    return tuple(names)


def check_mutates(
    r: Reader,
    what: str,
    schema: FunctionSchema,
    mutates: tuple[str, ...],
    sig_line: int,
    inplace_entry: Entry | None,
) -> None:
    """An op returns None exactly when it declares ``mutates``; never with ``inplace`` too."""
    returns_none = any(form.is_none for form in schema.returns.forms)
    if mutates and not returns_none:
        raise r.error(
            sig_line,
            f"{what} declares 'mutates' but returns {schema.returns}",
            "-> None: an op writes into its mutates arguments or returns its results",
        )
    if returns_none and not mutates:
        raise r.error(
            sig_line,
            f"{what} returns None but declares no 'mutates' arguments",
            "mutates: [the Tensor arguments every impl writes into]",
        )
    if mutates and inplace_entry is not None:
        raise r.error(
            inplace_entry.key_line,
            f"{what} has both 'mutates' and 'inplace'",
            "'inplace' only for functional ops with an in-place eager variant",
        )

"""Per-op lists of signature arguments: ``inplace`` (what an eager variant may overwrite),
``mutates`` (the caller-provided outputs every impl writes into), and how they combine with the
signature's return; ``cache`` (the paged KV-cache arguments, which verification never copies);
``bounds`` (int arguments that only bound lengths the tensors give)."""

from __future__ import annotations

from typing import Any, Callable

from .. import model as m
from .reader import Reader
from ..signature import FunctionSchema
from ..yamlnodes import Entry, Node

CACHE_KEYS = ("tensors", "slots")


def read_tensor_args(r: Reader, node: Node, sub: str, schema: FunctionSchema) -> tuple[str, ...]:
    """A non-empty list of distinct Tensor arguments of ``schema`` (``sub`` names the key)."""
    return _read_args(r, node, sub, schema, "Tensor", "[x, residual]", lambda t: t.is_tensor)


def read_bounds(r: Reader, node: Node, sub: str, schema: FunctionSchema) -> tuple[str, ...]:
    """A non-empty list of distinct int arguments of ``schema`` (``sub`` names the key)."""
    return _read_args(r, node, sub, schema, "int", "[max_seq_len]", lambda t: str(t) == "int")


def _read_args(
    r: Reader,
    node: Node,
    sub: str,
    schema: FunctionSchema,
    kind: str,
    example: str,
    accepts: Callable[[Any], bool],
) -> tuple[str, ...]:
    """A non-empty list of distinct arguments of ``schema`` whose type ``accepts`` takes
    (``kind`` names those types in the messages)."""
    expected = f"a list of the signature's {kind} arguments, like {example}"
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
        if not accepts(arg.type):
            raise r.error(
                item.line, f"{sub} names {name!r} of type {arg.type}", f"{kind} arguments only"
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
    collective: bool = False,
) -> None:
    """An op returns None exactly when it declares ``mutates`` (a collective may return None:
    a send); never with ``inplace`` too."""
    returns_none = any(form.is_none for form in schema.returns.forms)
    if mutates and not returns_none:
        raise r.error(
            sig_line,
            f"{what} declares 'mutates' but returns {schema.returns}",
            "-> None: an op writes into its mutates arguments or returns its results",
        )
    if returns_none and not mutates and not collective:
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


def read_cache(
    r: Reader, entry: Entry, what: str, schema: FunctionSchema, mutates: tuple[str, ...]
) -> m.Cache:
    """``cache: {tensors: [...], slots: arg}``: the op's paged KV-cache arguments, and for an op
    that writes into them the argument holding each token's slot. A writer's caches are among
    its ``mutates``; a reader's (no ``slots``) are not."""
    sub = f"cache of {what}"
    f = r.fields(entry.value, sub, "a mapping {tensors: [cache args], slots: arg}", CACHE_KEYS)
    tensors = read_tensor_args(
        r, f.require("tensors", "[key_cache, value_cache]").value, f"tensors of {sub}", schema
    )
    slots_entry = f.pop("slots")
    slots = None
    if slots_entry is not None:
        slots = r.ident(slots_entry.value, f"slots of {sub}")
        arg = schema.argument(slots)
        if arg is None or not arg.type.is_tensor or slots in tensors:
            raise r.error(
                slots_entry.value.line,
                f"slots of {sub} is {slots!r}",
                "a Tensor argument that is not a cache: one of "
                + ", ".join(
                    a.name for a in schema.arguments if a.type.is_tensor and a.name not in tensors
                ),
            )
        outside = [t for t in tensors if t not in mutates]
        if outside:
            raise r.error(
                entry.key_line,
                f"{sub} writes slots of {outside[0]!r}, which is not in 'mutates'",
                "the caches an op writes listed in its mutates",
            )
    else:
        written = [t for t in tensors if t in mutates]
        if written:
            raise r.error(
                entry.key_line,
                f"{sub} has no 'slots' but the op writes into {written[0]!r}",
                "slots: the argument with each token's slot, for an op that writes a cache",
            )
    f.done()
    return m.Cache(tensors, slots, entry.key_line)

"""The signature language of ops.yaml, torchgen style.

    rms_norm(Tensor x, Tensor? residual=None) -> Tensor | (Tensor, Tensor)

Types are ``Tensor``, ``int``, ``float``, ``bool``, ``str``, ``int[]`` (a sequence of ints, such
as a shape), ``Tensor[]`` (a list of tensors) and ``ScalarType`` (a ``torch.dtype``), each
optionally followed by ``?`` (may be None). An argument may also take one of several types,
``Tensor|Tensor[] input_`` (vLLM's ``all_gatherv`` takes a tensor or a list of them): a
``TypeUnion`` of distinct, non-optional types. A return is one type, a parenthesised tuple of
types, or alternatives joined by
``|``, or ``None`` alone for an op that only writes into caller-provided tensors (declared in
ops.yaml as ``mutates``). Defaults are Python literals (``None``, ``True``, ``False``, numbers, quoted strings).
Every class has ``parse(text)`` and a ``__str__`` that round-trips: ``parse(str(s)) == s``.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass

BASE_TYPES = ("Tensor", "int", "float", "bool", "str", "int[]", "Tensor[]", "ScalarType")
_PY_BASE = {
    "Tensor": "torch.Tensor",
    "int": "int",
    "float": "float",
    "bool": "bool",
    "str": "str",
    "int[]": "list[int]",
    "Tensor[]": "list[torch.Tensor]",
    "ScalarType": "torch.dtype",
}
_TOKEN = re.compile(
    r"""\s*(?:
        (?P<arrow>->)
      | (?P<string>'[^'\\]*'|"[^"\\]*")
      | (?P<number>-?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?))
      | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<punct>[?(),=|\[\]])
    )""",
    re.VERBOSE,
)


class SignatureError(ValueError):
    """A malformed signature; the loader adds the manifest line."""


@dataclass(frozen=True)
class Type:
    base: str
    optional: bool = False

    @staticmethod
    def parse(text: str) -> "Type":
        return _Parser(text).whole(_Parser.type_)

    def __str__(self) -> str:
        return self.base + ("?" if self.optional else "")

    @property
    def is_tensor(self) -> bool:
        return self.base == "Tensor"

    @property
    def has_tensor_list(self) -> bool:
        """Whether a value may be a list of tensors (``Tensor[]``)."""
        return self.base == "Tensor[]"

    @property
    def alternatives(self) -> tuple["Type", ...]:
        """The types a value may have: this one alone (a ``TypeUnion`` has several)."""
        return (self,)

    def python(self) -> str:
        """The Python annotation: ``torch.Tensor | None`` for ``Tensor?``."""
        return _PY_BASE[self.base] + (" | None" if self.optional else "")

    def accepts(self, value: object) -> bool:
        """Whether a literal ``value`` is a valid default/argument of this type."""
        if value is None:
            return self.optional
        if self.base == "bool":
            return isinstance(value, bool)
        if self.base == "int":
            return isinstance(value, int) and not isinstance(value, bool)
        if self.base == "float":
            return isinstance(value, (int, float)) and not isinstance(value, bool)
        if self.base == "str":
            return isinstance(value, str)
        if self.base == "int[]":
            return isinstance(value, (list, tuple)) and all(
                isinstance(v, int) and not isinstance(v, bool) for v in value
            )
        return False  # a Tensor, a list of them or a dtype has no literal other than None


@dataclass(frozen=True)
class TypeUnion:
    """An argument that takes a value of any of several types, ``Tensor|Tensor[]``: two or more
    distinct types, none of them optional (the union as a whole is never None)."""

    types: tuple[Type, ...]

    def __str__(self) -> str:
        return "|".join(str(t) for t in self.types)

    #: never None; never a plain Tensor (so never in mutates, inplace, a cache or supports)
    optional = False
    is_tensor = False

    @property
    def has_tensor_list(self) -> bool:
        return any(t.has_tensor_list for t in self.types)

    @property
    def alternatives(self) -> tuple[Type, ...]:
        return self.types

    def python(self) -> str:
        """The Python annotation: ``torch.Tensor | list[torch.Tensor]``."""
        return " | ".join(t.python() for t in self.types)

    def accepts(self, value: object) -> bool:
        return any(t.accepts(value) for t in self.types)


@dataclass(frozen=True)
class Argument:
    name: str
    type: Type | TypeUnion
    default: str | None = None  # canonical Python literal text, e.g. "None", "1e-06", "'none'"

    @staticmethod
    def parse(text: str) -> "Argument":
        return _Parser(text).whole(_Parser.argument)

    def __str__(self) -> str:
        text = f"{self.type} {self.name}"
        return text if self.default is None else f"{text}={self.default}"

    @property
    def has_default(self) -> bool:
        return self.default is not None

    @property
    def default_value(self) -> object:
        return None if self.default is None else ast.literal_eval(self.default)

    def python(self) -> str:
        """``x: torch.Tensor`` / ``residual: torch.Tensor | None = None``."""
        text = f"{self.name}: {self.type.python()}"
        return text if self.default is None else f"{text} = {self.default}"

    def python_plain(self) -> str:
        """``x`` / ``residual=None`` (no annotation)."""
        return self.name if self.default is None else f"{self.name}={self.default}"


@dataclass(frozen=True)
class ReturnForm:
    """One alternative of a return: a single type, or a tuple of types."""

    types: tuple[Type, ...]
    is_tuple: bool

    def __str__(self) -> str:
        if self.is_none:
            return "None"
        inner = ", ".join(str(t) for t in self.types)
        return f"({inner})" if self.is_tuple else inner

    @property
    def is_none(self) -> bool:
        """``-> None``: an op that only writes into its ``mutates`` arguments."""
        return not self.types

    def python(self) -> str:
        if self.is_none:
            return "None"
        if not self.is_tuple:
            return self.types[0].python()
        return "tuple[" + ", ".join(t.python() for t in self.types) + "]"

    @property
    def all_tensors(self) -> bool:
        return bool(self.types) and all(t.is_tensor for t in self.types)


@dataclass(frozen=True)
class Returns:
    forms: tuple[ReturnForm, ...]

    @staticmethod
    def parse(text: str) -> "Returns":
        return _Parser(text).whole(_Parser.returns)

    def __str__(self) -> str:
        return " | ".join(str(f) for f in self.forms)

    def python(self) -> str:
        return " | ".join(f.python() for f in self.forms)

    @property
    def all_tensors(self) -> bool:
        return all(f.all_tensors for f in self.forms)

    @property
    def is_single_tensor(self) -> bool:
        """Exactly ``Tensor``: a custom op can return it as is."""
        return self.forms == (ReturnForm((Type("Tensor"),), False),)

    def tensor_list_decoding(self) -> tuple[tuple[int, str], ...]:
        """How an adapter turns a custom op's ``list[Tensor]`` back into this return.

        An impl's result is flattened to its tensors with trailing Nones dropped; each possible
        list length must identify one form. The adapters are built at run time
        (``vllm_fl.dispatch.runtime.registration``, which decodes by the same rule); the loader
        calls this to refuse, with the manifest line, return forms no adapter could tell apart.
        Returns ``(length, python expression over 'out')`` pairs, or raises SignatureError when
        two forms flatten to the same length.
        """
        by_length: dict[int, tuple[str, str]] = {}
        for form in self.forms:
            n = len(form.types)
            # trailing optional elements may be None and are then dropped from the list
            required = n
            while required > 0 and form.types[required - 1].optional:
                required -= 1
            if any(t.optional for t in form.types[:required]):
                raise SignatureError(
                    f"return form {form} has an optional element before a required one; a "
                    "custom op result can only drop trailing Nones"
                )
            for length in range(required, n + 1):
                if form.is_tuple:
                    parts = [f"out[{i}]" if i < length else "None" for i in range(n)]
                    expr = "(" + ", ".join(parts) + ("," if n == 1 else "") + ")"
                else:
                    expr = "out[0]" if length else "None"
                if length in by_length and by_length[length][1] != expr:
                    raise SignatureError(
                        f"return forms {by_length[length][0]} and {form} both flatten to "
                        f"{length} tensor(s), so a custom op result cannot tell them apart"
                    )
                by_length[length] = (str(form), expr)
        return tuple((length, expr) for length, (_, expr) in sorted(by_length.items()))


@dataclass(frozen=True)
class FunctionSchema:
    name: str
    arguments: tuple[Argument, ...]
    returns: Returns

    @staticmethod
    def parse(text: str) -> "FunctionSchema":
        return _Parser(text).whole(_Parser.schema)

    def __str__(self) -> str:
        args = ", ".join(str(a) for a in self.arguments)
        return f"{self.name}({args}) -> {self.returns}"

    def argument(self, name: str) -> Argument | None:
        for arg in self.arguments:
            if arg.name == name:
                return arg
        return None

    @property
    def arg_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.arguments)

    @property
    def has_tensor_list(self) -> bool:
        """Whether an argument or a return may be a list of tensors (``Tensor[]``)."""
        types = [a.type for a in self.arguments]
        types += [t for form in self.returns.forms for t in form.types]
        return any(t.has_tensor_list for t in types)


class _Parser:
    """A recursive-descent parser over a token list; errors say what was expected where."""

    def __init__(self, text: str):
        self.text = text
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        stripped = text.rstrip()
        while pos < len(stripped):
            match = _TOKEN.match(stripped, pos)
            if match is None or match.end() == pos:
                raise SignatureError(f"unexpected character {stripped[pos:].lstrip()[:1]!r}")
            kind = match.lastgroup
            assert kind is not None
            self.tokens.append((kind, match.group(kind)))
            pos = match.end()
        self.pos = 0

    def whole(self, rule):
        result = rule(self)
        if self.pos != len(self.tokens):
            raise SignatureError(f"unexpected {self.tokens[self.pos][1]!r} after {result}")
        return result

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def next(self, what: str) -> tuple[str, str]:
        token = self.peek()
        if token is None:
            raise SignatureError(f"unexpected end of text, wanted {what}")
        self.pos += 1
        return token

    def expect(self, value: str, what: str | None = None) -> None:
        token = self.next(what or repr(value))
        if token[1] != value:
            raise SignatureError(f"unexpected {token[1]!r}, wanted {what or repr(value)}")

    def accept(self, value: str) -> bool:
        token = self.peek()
        if token is not None and token[1] == value and token[0] != "string":
            self.pos += 1
            return True
        return False

    def name(self, what: str) -> str:
        kind, value = self.next(what)
        if kind != "name":
            raise SignatureError(f"unexpected {value!r}, wanted {what}")
        return value

    def type_(self) -> Type:
        base = self.name("a type (" + ", ".join(BASE_TYPES) + ")")
        if self.accept("["):
            self.expect("]", "']' after '['")
            base += "[]"
        if base not in BASE_TYPES:
            raise SignatureError(f"unknown type {base!r}, wanted one of " + ", ".join(BASE_TYPES))
        return Type(base, self.accept("?"))

    def argument_type(self) -> Type | TypeUnion:
        """A type, or alternatives joined by ``|`` (``Tensor|Tensor[]``)."""
        types = [self.type_()]
        while self.accept("|"):
            types.append(self.type_())
        if len(types) == 1:
            return types[0]
        union = TypeUnion(tuple(types))
        for i, type_ in enumerate(types):
            if type_.optional:
                raise SignatureError(
                    f"{type_} in the union {union} is optional; a union takes no None"
                )
            if type_ in types[:i]:
                raise SignatureError(f"{type_} appears twice in the union {union}")
        return union

    def argument(self) -> Argument:
        type_ = self.argument_type()
        name = self.name(f"an argument name after {type_}")
        default = None
        if self.accept("="):
            kind, text = self.next("a default value")
            if kind not in ("name", "number", "string"):
                raise SignatureError(f"unexpected {text!r}, wanted a default value")
            try:
                value = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                raise SignatureError(
                    f"default {text!r} of {name!r} is not a literal (None, True, False, a number "
                    "or a quoted string)"
                ) from None
            if isinstance(value, float) and not math.isfinite(value):
                raise SignatureError(f"default {text} of {name!r} is not a finite number")
            if not type_.accepts(value):
                raise SignatureError(f"default {text} does not fit type {type_} of {name!r}")
            if isinstance(value, float) and isinstance(type_, Type) and type_.base == "int":
                raise SignatureError(f"default {text} does not fit type {type_} of {name!r}")
            default = repr(value)
        return Argument(name, type_, default)

    def returns(self) -> Returns:
        token = self.peek()
        if token is not None and token == ("name", "None"):
            self.pos += 1
            return Returns((ReturnForm((), False),))
        forms = [self.form()]
        while self.accept("|"):
            forms.append(self.form())
        return Returns(tuple(forms))

    def form(self) -> ReturnForm:
        if self.accept("("):
            types = [self.type_()]
            while self.accept(","):
                types.append(self.type_())
            self.expect(")", "')' closing the tuple")
            return ReturnForm(tuple(types), True)
        return ReturnForm((self.type_(),), False)

    def schema(self) -> FunctionSchema:
        name = self.name("the op name")
        self.expect("(", "'(' after the op name")
        args: list[Argument] = []
        if not self.accept(")"):
            args.append(self.argument())
            while self.accept(","):
                args.append(self.argument())
            self.expect(")", "')' or ',' in the argument list")
        self.expect("->", "'->' and the return type")
        returns = self.returns()
        seen: set[str] = set()
        for i, arg in enumerate(args):
            if arg.name in seen:
                raise SignatureError(f"argument {arg.name!r} appears twice")
            seen.add(arg.name)
            if arg.name == "self":
                raise SignatureError("'self' is implicit (ops with a layer receive it first)")
            if arg.default is None and i and args[i - 1].default is not None:
                raise SignatureError(
                    f"argument {arg.name!r} without a default follows one with a default"
                )
        return FunctionSchema(name, tuple(args), returns)

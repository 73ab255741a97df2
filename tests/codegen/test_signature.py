"""The signature language: parse() and a round-tripping __str__, Python annotations, and how
opaque adapters decode a custom op's tensor list."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codegen.signature import (
    BASE_TYPES,
    Argument,
    FunctionSchema,
    Returns,
    ReturnForm,
    SignatureError,
    Type,
    TypeUnion,
)


def test_rms_norm_signature():
    schema = FunctionSchema.parse(
        "rms_norm(Tensor x, Tensor? residual=None) -> Tensor | (Tensor, Tensor)"
    )
    assert schema.name == "rms_norm"
    assert schema.arguments == (
        Argument("x", Type("Tensor")),
        Argument("residual", Type("Tensor", optional=True), "None"),
    )
    assert schema.returns.python() == "torch.Tensor | tuple[torch.Tensor, torch.Tensor]"
    assert schema.arguments[1].python() == "residual: torch.Tensor | None = None"
    assert str(schema) == "rms_norm(Tensor x, Tensor? residual=None) -> Tensor | (Tensor, Tensor)"


def test_defaults_are_canonical_python_literals():
    schema = FunctionSchema.parse('f(str a="none", float eps=1.0e-6, int n=-3, bool b=True) -> str')
    assert [a.default for a in schema.arguments] == ["'none'", "1e-06", "-3", "True"]
    assert [a.default_value for a in schema.arguments] == ["none", 1e-6, -3, True]
    assert FunctionSchema.parse(str(schema)) == schema


def test_a_tensor_or_a_list_of_tensors():
    schema = FunctionSchema.parse(
        "all_gatherv(Tensor|Tensor[] input_, int dim=0, int[]? sizes=None) -> Tensor | Tensor[]"
    )
    union = TypeUnion((Type("Tensor"), Type("Tensor[]")))
    assert schema.arguments[0] == Argument("input_", union)
    assert schema.arguments[0].python() == "input_: torch.Tensor | list[torch.Tensor]"
    assert schema.returns.python() == "torch.Tensor | list[torch.Tensor]"
    assert schema.has_tensor_list
    assert not union.is_tensor and not union.optional
    assert not FunctionSchema.parse("f(Tensor x, int[] s) -> Tensor").has_tensor_list
    assert FunctionSchema.parse("f(Tensor x) -> Tensor[]").has_tensor_list
    assert FunctionSchema.parse(str(schema)) == schema


@pytest.mark.parametrize(
    "text, message",
    [
        ("f(Tensor|Tensor[]? x) -> Tensor", "Tensor[]? in the union Tensor|Tensor[]? is optional"),
        ("f(Tensor|Tensor x) -> Tensor", "Tensor appears twice in the union"),
        ("f(Tensor|int x=None) -> Tensor", "default None does not fit type Tensor|int"),
        ("f(Tensor x) ->", "unexpected end of text"),
        ("f(Tensr x) -> Tensor", "unknown type 'Tensr'"),
        ("f(Tensor x, Tensor x) -> Tensor", "argument 'x' appears twice"),
        ("f(int n=1.5) -> int", "default 1.5 does not fit type int"),
        ("f(Tensor x=None) -> Tensor", "default None does not fit type Tensor"),
        ("f(Tensor? a=None, Tensor b) -> Tensor", "without a default follows one with"),
        ("f(Tensor self) -> Tensor", "'self' is implicit"),
        ("f(Tensor x) -> Tensor $", "unexpected character '$'"),
        ("f(float e=1e999) -> Tensor", "is not a finite number"),
        ("f(Tensor x -> Tensor", "wanted ')' or ','"),
        ("f(int n=abc) -> int", "is not a literal"),
    ],
)
def test_malformed_signatures(text, message):
    with pytest.raises(SignatureError, match=re.escape(message)):
        FunctionSchema.parse(text)


def test_tensor_list_decoding():
    assert Returns.parse("Tensor | (Tensor, Tensor)").tensor_list_decoding() == (
        (1, "out[0]"),
        (2, "(out[0], out[1])"),
    )
    assert Returns.parse("(Tensor, Tensor?)").tensor_list_decoding() == (
        (1, "(out[0], None)"),
        (2, "(out[0], out[1])"),
    )
    with pytest.raises(SignatureError, match="both flatten to 1 tensor"):
        Returns.parse("Tensor | (Tensor, Tensor?)").tensor_list_decoding()
    with pytest.raises(SignatureError, match="optional element before a required one"):
        Returns.parse("(Tensor?, Tensor)").tensor_list_decoding()


names = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True).filter(lambda n: n != "self")
types = st.builds(Type, st.sampled_from(BASE_TYPES), st.booleans())
forms = st.one_of(
    types.map(lambda t: ReturnForm((t,), False)),
    st.lists(types, min_size=1, max_size=3).map(lambda ts: ReturnForm(tuple(ts), True)),
)


@st.composite
def schemas(draw):
    arg_names = draw(st.lists(names, max_size=4, unique=True))
    n_defaults = draw(st.integers(0, len(arg_names)))
    args = []
    for i, name in enumerate(arg_names):
        type_ = draw(types)
        default = None
        if i >= len(arg_names) - n_defaults:
            if type_.optional:
                default = "None"
            else:
                value = {
                    "Tensor": None,
                    "int[]": None,
                    "Tensor[]": None,
                    "ScalarType": None,
                    "int": draw(st.integers(-5, 5)),
                    "float": draw(st.floats(-1e6, 1e6, allow_nan=False)),
                    "bool": draw(st.booleans()),
                    "str": draw(st.sampled_from(["none", "tanh", "a b"])),
                }[type_.base]
                if value is None:  # no literal but None: make the type optional
                    type_ = Type(type_.base, True)
                default = repr(value)
        args.append(Argument(name, type_, default))
    returns = Returns(tuple(draw(st.lists(forms, min_size=1, max_size=3))))
    return FunctionSchema(draw(names), tuple(args), returns)


@given(schemas())
def test_parse_str_round_trips(schema):
    assert FunctionSchema.parse(str(schema)) == schema


@pytest.mark.parametrize(
    "type_, value, ok",
    [
        ("int[]", [3, 2], True),
        ("int[]", (3,), True),
        ("int[]", [], True),
        ("int[]", [3, 2.0], False),
        ("int[]", [True], False),
        ("int[]", 3, False),
        ("int[]", None, False),
        ("int[]?", None, True),
        ("int", [3], False),
        ("ScalarType", "float32", False),
    ],
)
def test_int_list_literals(type_, value, ok):
    assert Type.parse(type_).accepts(value) is ok

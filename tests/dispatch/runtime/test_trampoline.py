"""The trampoline builder, on its own: the code it generates for a signature key, the cells it
reads, and what its handler passes to the fallback."""

import inspect

import pytest

from vllm_fl.dispatch.runtime.trampoline import (
    FREEVARS,
    build,
    same_key,
    signature_key,
    tracing_now,
)


def cells(fn):
    """name -> closure cell of a trampoline."""
    return dict(zip(fn.__code__.co_freevars, fn.__closure__))


def install(fn, impl, strict=False, fallback=None, traced=None):
    c = cells(fn)
    c["_impl"].cell_contents = impl
    c["_traced"].cell_contents = traced if traced is not None else impl
    c["_strict"].cell_contents = strict
    c["_fallback"].cell_contents = fallback


def layer_impl(self, x, /, residual=None, *, scale=2.0):
    return (self, x, residual, scale)


# --------------------------------------------------------------------------- signature keys


def test_signature_key_lists_name_kind_and_default_of_each_parameter():
    P = inspect.Parameter
    assert signature_key(layer_impl) == (
        ("self", P.POSITIONAL_ONLY, P.empty),
        ("x", P.POSITIONAL_ONLY, P.empty),
        ("residual", P.POSITIONAL_OR_KEYWORD, None),
        ("scale", P.KEYWORD_ONLY, 2.0),
    )


def _star(*args, **kwargs):
    return args


def _reserved(x, _impl=None):
    return x


@pytest.mark.parametrize("fn", [_star, _reserved, print], ids=["varargs", "reserved", "builtin"])
def test_no_signature_key_where_no_exact_trampoline_fits(fn):
    assert signature_key(fn) is None


def test_same_key_compares_names_kinds_and_defaults_by_type_and_value():
    def a(x, y=1):
        return x

    def b(x, y=1):
        return x

    def other_name(x, z=1):
        return x

    def float_default(x, y=1.0):
        return x

    def keyword_only(x, *, y=1):
        return x

    key = signature_key(a)
    assert same_key(key, signature_key(b))
    assert not same_key(key, signature_key(other_name))
    assert not same_key(key, signature_key(float_default))  # 1 == 1.0, but another type
    assert not same_key(key, signature_key(keyword_only))
    assert not same_key(key, key[:1])


def test_same_key_treats_defaults_that_cannot_be_compared_as_different():
    class NoEq:
        def __eq__(self, other):
            raise RuntimeError("ambiguous truth value")

    first, second = NoEq(), NoEq()

    def a(x, y=first):
        return x

    def b(x, y=second):
        return x

    assert not same_key(signature_key(a), signature_key(b))
    assert same_key(signature_key(a), signature_key(a))  # the same object


# --------------------------------------------------------------------------- built trampolines


def test_exact_trampoline_has_the_impl_signature_and_calls_the_impl_cell():
    fn = build("op_norm", signature_key(layer_impl))
    assert fn.__name__ == "op_norm" and fn.__code__.co_freevars == FREEVARS
    assert inspect.signature(fn) == inspect.signature(layer_impl)
    install(fn, layer_impl)
    assert fn("layer", 1) == ("layer", 1, None, 2.0)
    assert fn("layer", 1, residual=3, scale=4) == ("layer", 1, 3, 4)
    with pytest.raises(TypeError):
        fn("layer", x=1)  # positional-only, like the impl


def test_exact_trampoline_keeps_the_impl_default_objects():
    marker = object()

    def impl(x, flag=marker):
        return flag

    fn = build("op_flag", signature_key(impl))
    install(fn, impl)
    assert fn(1) is marker


def test_generic_trampoline_passes_any_arguments_on():
    fn = build("op_any", None)
    assert str(inspect.signature(fn)) == "(*args, **kwargs)"
    install(fn, lambda *args, **kwargs: (args, kwargs))
    assert fn(1, 2, k=3) == ((1, 2), {"k": 3})


def test_a_failure_goes_to_the_fallback_with_what_was_called_and_the_arguments():
    seen = []

    def broken(self, x, /, residual=None, *, scale=2.0):
        raise ValueError("kernel failed")

    def fallback(exc, called, args, kwargs, traced):
        seen.append((type(exc), called, args, kwargs, traced))
        return "recovered"

    fn = build("op_norm", signature_key(layer_impl))
    install(fn, broken, fallback=fallback, traced="traced-impl")
    assert fn("layer", 1, residual=3) == "recovered"
    assert seen == [(ValueError, broken, ("layer", 1, 3), {"scale": 2.0}, "traced-impl")]
    generic = build("op_any", None)
    install(generic, broken, fallback=fallback)
    assert generic("layer", 1, scale=5) == "recovered"
    assert seen[-1][2:4] == (("layer", 1), {"scale": 5})


def test_strict_trampoline_raises_without_the_fallback():
    def broken(x):
        raise KeyError("k")

    def fallback(*args):
        raise AssertionError("strict mode must not fall back")

    fn = build("op_x", signature_key(broken))
    install(fn, broken, strict=True, fallback=fallback)
    with pytest.raises(KeyError):
        fn(1)


def test_only_a_split_trampoline_asks_whether_torch_compile_traces():
    def impl(x):
        return "eager"

    def traced(x):
        return "traced"

    plain = build("op_x", signature_key(impl))
    split = build("op_x", signature_key(impl), split=True)
    assert "_is_compiling" not in plain.__code__.co_names
    assert "_is_compiling" in split.__code__.co_names
    install(split, impl, traced=traced)
    assert split(1) == "eager" and not tracing_now()


def test_a_trampoline_built_over_existing_cells_shares_them():
    def impl(x, y=0):
        return ("first", x, y)

    def other(x, y=0):
        return ("second", x, y)

    first = build("op_x", None)
    install(first, impl)
    second = build("op_x", signature_key(other), closure=first.__closure__)
    assert inspect.signature(second) == inspect.signature(other)
    assert second(1) == ("first", 1, 0)  # the impl the first one's cell holds
    cells(first)["_impl"].cell_contents = other
    assert first(1) == ("second", 1, 0) and second(1, y=2) == ("second", 1, 2)

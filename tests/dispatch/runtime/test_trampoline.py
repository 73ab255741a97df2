"""The trampoline builder, on its own: which trampoline a signature key gets (the generated one
of a manifest op, or the generic one), the cells it reads, and what its handler passes to the
fallback."""

import inspect

import pytest

pytest.importorskip("torch")  # the generated trampolines call torch.compiler.is_compiling

from vllm_fl.dispatch import trampolines  # noqa: E402
from vllm_fl.dispatch.runtime import trampoline  # noqa: E402
from vllm_fl.dispatch.runtime.trampoline import (  # noqa: E402
    FREEVARS,
    build,
    generated,
    same_key,
    signature_key,
    tracing_now,
)
from vllm_fl.dispatch.signatures import contract  # noqa: E402
from vllm_fl.dispatch.spec import FLBackendBase  # noqa: E402


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


# --------------------------------------------------------------------------- generated trampolines


def rms_norm_impl(self, x, residual=None):
    return (self, x, residual)


def test_a_manifest_op_gets_its_generated_trampoline_with_the_impl_signature():
    fn = build("rms_norm", signature_key(rms_norm_impl))
    assert fn.__code__.co_filename == trampolines.__file__
    assert fn.__name__ == "rms_norm" and fn.__code__.co_freevars == FREEVARS
    assert inspect.signature(fn) == inspect.signature(rms_norm_impl)
    install(fn, rms_norm_impl)
    assert fn("layer", 1) == ("layer", 1, None)
    assert fn("layer", x=1, residual=3) == ("layer", 1, 3)


def test_a_bad_call_of_a_generated_trampoline_raises_before_any_impl_runs():
    def fallback(*args):
        raise AssertionError("a bad call is the caller's error, not the impl's")

    fn = build("rms_norm", signature_key(rms_norm_impl))
    install(fn, rms_norm_impl, fallback=fallback)
    with pytest.raises(TypeError):
        fn("layer")
    with pytest.raises(TypeError):
        fn("layer", 1, scale=2)


def test_the_layer_parameter_may_have_any_name():
    """The layer is always passed positionally, so an impl naming it otherwise (or making it
    positional-only) still gets the generated trampoline, whose first parameter is ``self``."""

    def named_layer(layer, x, residual=None):
        return (layer, x, residual)

    def positional_layer(layer, /, x, residual=None):
        return (layer, x, residual)

    for impl in (named_layer, positional_layer):
        fn = build("rms_norm", signature_key(impl))
        assert fn.__code__.co_filename == trampolines.__file__
        assert str(inspect.signature(fn)) == "(self, x, residual=None)"
        install(fn, impl)
        assert fn("layer", 1, residual=2) == ("layer", 1, 2)


def test_every_generated_trampoline_takes_the_parameters_of_its_op():
    """The generated key of each op of FLBackendBase: the layer as ``self``, then the op's
    arguments with its defaults, each positional-or-keyword (the rule of ``signatures``)."""
    P = inspect.Parameter
    assert set(trampolines.TRAMPOLINES) == set(FLBackendBase.OPS)
    for op in FLBackendBase.OPS:
        has_layer, args = contract(op)
        expected = (("self", P.POSITIONAL_OR_KEYWORD, P.empty),) if has_layer else ()
        expected += tuple((name, P.POSITIONAL_OR_KEYWORD, default) for name, default in args)
        key, plain, split = generated(op)
        assert same_key(key, expected), op
        for factory in (plain, split):
            fn = factory(None, None, False, None)
            assert fn.__name__ == op and fn.__code__.co_freevars == FREEVARS, op


def test_the_generated_hot_path_is_one_walrus_call_in_a_try():
    """The code the generator writes is the trampoline's hot path exactly: nothing before the
    call but binding ``_f``."""

    def reference(_impl, _traced, _strict, _fallback):
        def rms_norm(self, x, residual=None):
            try:
                return (_f := _impl)(self, x, residual)
            except Exception as _exc:
                if _strict:
                    raise
                return _fallback(_exc, _f, (self, x, residual), {}, _traced)

        return rms_norm

    made = build("rms_norm", signature_key(rms_norm_impl)).__code__
    want = reference(None, None, False, None).__code__
    assert made.co_code == want.co_code
    assert made.co_names == want.co_names and made.co_varnames == want.co_varnames


def test_a_manifest_op_whose_impls_differ_from_it_gets_the_generic_trampoline():
    def other_default(self, x, residual=0):
        return residual

    fn = build("rms_norm", signature_key(other_default))
    assert fn.__code__.co_filename == trampoline.__file__
    install(fn, other_default)
    assert fn("layer", 1) == 0


# --------------------------------------------------------------------------- generic trampolines


def test_an_op_outside_the_manifest_gets_the_generic_trampoline_with_the_impl_signature():
    fn = build("plugin_norm", signature_key(layer_impl))
    assert fn.__code__.co_filename == trampoline.__file__
    assert fn.__name__ == "plugin_norm" and fn.__code__.co_freevars == FREEVARS
    assert inspect.signature(fn) == inspect.signature(layer_impl)
    install(fn, layer_impl)
    assert fn("layer", 1) == ("layer", 1, None, 2.0)
    assert fn("layer", 1, residual=3, scale=4) == ("layer", 1, 3, 4)


def test_a_bad_call_of_a_generic_trampoline_reaches_the_fallback():
    """The generic trampoline binds nothing: the impl raises TypeError, which goes to the
    fallback like any failure (``Binding`` then re-raises it as the caller's error)."""
    seen = []

    def fallback(exc, called, args, kwargs, traced):
        seen.append((type(exc), called, args, kwargs))
        raise exc

    fn = build("plugin_norm", signature_key(layer_impl))
    install(fn, layer_impl, fallback=fallback)
    with pytest.raises(TypeError):
        fn("layer", x=1)  # positional-only in the impl
    assert seen == [(TypeError, layer_impl, ("layer",), {"x": 1})]


def test_the_generic_trampoline_keeps_the_impl_default_objects():
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


# --------------------------------------------------------------------------- both kinds


def test_a_failure_goes_to_the_fallback_with_what_was_called_and_the_arguments():
    seen = []

    def broken(self, x, residual=None):
        raise ValueError("kernel failed")

    def fallback(exc, called, args, kwargs, traced):
        seen.append((type(exc), called, args, kwargs, traced))
        return "recovered"

    fn = build("rms_norm", signature_key(broken))
    install(fn, broken, fallback=fallback, traced="traced-impl")
    assert fn("layer", 1, residual=3) == "recovered"
    assert seen == [(ValueError, broken, ("layer", 1, 3), {}, "traced-impl")]
    generic = build("plugin_norm", signature_key(layer_impl))
    install(generic, broken, fallback=fallback)
    assert generic("layer", 1, scale=5) == "recovered"
    assert seen[-1][2:4] == (("layer", 1), {"scale": 5})


@pytest.mark.parametrize("op", ["silu_and_mul", "plugin_op"])
def test_strict_trampoline_raises_without_the_fallback(op):
    def broken(self, x):
        raise KeyError("k")

    def fallback(*args):
        raise AssertionError("strict mode must not fall back")

    fn = build(op, signature_key(broken))
    install(fn, broken, strict=True, fallback=fallback)
    with pytest.raises(KeyError):
        fn("layer", 1)


@pytest.mark.parametrize("op", ["silu_and_mul", "plugin_op"])
def test_only_a_split_trampoline_asks_whether_torch_compile_traces(op):
    def impl(self, x):
        return "eager"

    def traced(self, x):
        return "traced"

    plain = build(op, signature_key(impl))
    split = build(op, signature_key(impl), split=True)
    assert "_is_compiling" not in plain.__code__.co_names
    assert "_is_compiling" in split.__code__.co_names
    assert inspect.signature(split) == inspect.signature(impl)
    install(split, impl, traced=traced)
    assert split("layer", 1) == "eager" and not tracing_now()


def test_a_trampoline_built_over_existing_cells_shares_them():
    def impl(self, x, residual=None):
        return ("first", x, residual)

    def other(self, x, residual=None):
        return ("second", x, residual)

    first = build("rms_norm", None)
    install(first, impl)
    variants = [
        build("rms_norm", signature_key(other), split=split, closure=first.__closure__)
        for split in (False, True)
    ]
    assert variants[0].__code__.co_filename == trampolines.__file__
    for second in variants:
        assert second.__closure__ is first.__closure__
        assert inspect.signature(second) == inspect.signature(other)
        assert second(None, 1) == ("first", 1, None)  # the impl the first one's cell holds
    cells(first)["_impl"].cell_contents = other
    assert first(None, 1) == ("second", 1, None)
    assert all(second(None, 1, residual=2) == ("second", 1, 2) for second in variants)

"""Direct binding: while nothing can fall back from the selected impl (strict mode, or a single
candidate), a class that holds the op gets the impl's function itself, so ``layer.forward_oot(x)``
is one call of the impl; every change of selection puts the trampoline back or re-binds, also in
the methods ``follow_bound_method`` keeps (vLLM's ``_forward_method``)."""

import types

import pytest
from dispatch_helpers import norm_layer

from vllm_fl.dispatch import (
    OpImpl,
    OpManager,
    OpRegistry,
    SelectionPolicy,
    dispatch_method,
    follow_bound_method,
    policy_context,
    wrap_selections,
)

ONLY_FLAGOS = SelectionPolicy.from_dict(per_op_order={"rms_norm": ["flagos"]})
ONLY_REFERENCE = SelectionPolicy.from_dict(per_op_order={"rms_norm": ["reference"]})
STRICT = SelectionPolicy.from_dict(strict=True)


def impl_fn(m, impl_id, op="rms_norm"):
    return next(i.fn for i in m.registry.get_implementations(op) if i.impl_id == impl_id)


def single(op="op", fn=None):
    """(manager, Layer class, the impl's function): one reference impl of ``op``."""

    def only(self, x):
        return ("only", x)

    fn = fn or only
    reg = OpRegistry()
    reg.register_impl(OpImpl(op, "reference.torch", "reference", fn))
    m = OpManager(registry=reg)

    class Layer:
        forward_oot = dispatch_method(op, manager=m)

    return m, Layer, fn


def test_a_single_candidate_puts_the_impl_itself_on_the_class():
    m, Layer, fn = single()
    layer = Layer()
    assert Layer.__dict__["forward_oot"] is m.binding("op").fn  # nothing resolved yet
    assert layer.forward_oot(1) == ("only", 1)
    assert Layer.__dict__["forward_oot"] is fn
    assert layer.forward_oot.__func__ is fn
    assert layer.forward_oot(2) == ("only", 2)
    assert m.resolution_count == 1


def test_a_possible_fallback_keeps_the_trampoline_and_strict_mode_binds_the_impl():
    m, Layer, calls = norm_layer()
    layer = Layer()
    assert layer.forward_oot(1) == "flagos"
    assert Layer.__dict__["forward_oot"] is m.binding("rms_norm").fn
    with policy_context(STRICT):
        assert Layer.__dict__["forward_oot"] is impl_fn(m, "default.flagos")
        assert layer.forward_oot(1) == "flagos"
    assert Layer.__dict__["forward_oot"] is m.binding("rms_norm").fn


def test_a_policy_change_rebinds_the_class():
    m, Layer, calls = norm_layer()
    layer = Layer()
    with policy_context(ONLY_FLAGOS):
        assert layer.forward_oot(1) == "flagos"
        assert Layer.__dict__["forward_oot"] is impl_fn(m, "default.flagos")
        with policy_context(ONLY_REFERENCE):
            # re-selected at the change (the op is in use), before any call
            assert Layer.__dict__["forward_oot"] is impl_fn(m, "reference.torch")
            assert layer.forward_oot(1) == "reference"
        assert Layer.__dict__["forward_oot"] is impl_fn(m, "default.flagos")
        assert layer.forward_oot(1) == "flagos"
    assert Layer.__dict__["forward_oot"] is m.binding("rms_norm").fn
    assert layer.forward_oot(1) == "flagos"
    assert [tag for tag, _ in calls] == ["flagos", "reference", "flagos", "flagos"]


def test_a_registry_change_puts_the_trampoline_back_at_once():
    m, Layer, fn = single()
    layer = Layer()
    layer.forward_oot(1)
    assert Layer.__dict__["forward_oot"] is fn
    m.registry.register_impl(
        OpImpl("op", "default.flagos", "flagos", lambda self, x: ("flagos", x))
    )
    assert Layer.__dict__["forward_oot"] is m.binding("op").fn
    assert layer.forward_oot(1) == ("flagos", 1)
    assert Layer.__dict__["forward_oot"] is m.binding("op").fn  # two candidates now


def test_falling_back_to_the_last_candidate_binds_it_until_the_failures_are_cleared():
    calls = []

    def broken(self, x):
        calls.append("flagos")
        raise RuntimeError("kernel failed")

    def reference(self, x):
        calls.append("reference")
        return "reference"

    reg = OpRegistry()
    reg.register_many(
        [
            OpImpl("op", "default.flagos", "flagos", broken),
            OpImpl("op", "reference.torch", "reference", reference),
        ]
    )
    m = OpManager(registry=reg)

    class Layer:
        forward_oot = dispatch_method("op", manager=m)

    layer = Layer()
    assert layer.forward_oot(1) == "reference"
    assert Layer.__dict__["forward_oot"] is reference
    assert layer.forward_oot(1) == "reference"
    m.clear_failed_impls()
    assert Layer.__dict__["forward_oot"] is m.binding("op").fn
    assert layer.forward_oot(1) == "reference"
    assert calls == ["flagos", "reference", "reference", "flagos", "reference"]


def test_module_attributes_keep_the_trampoline():
    """A later ``from module import fn`` would keep what it found: a module is never given the
    impl itself."""
    m, Layer, fn = single()
    module = types.ModuleType("fake_module")
    dispatch_method("op", manager=m).__set_name__(module, "op")
    layer = Layer()
    assert module.op(layer, 1) == ("only", 1)
    assert Layer.__dict__["forward_oot"] is fn
    assert module.op is m.binding("op").fn


def test_a_callable_that_is_no_function_keeps_the_trampoline():
    """Only a Python function binds the layer when the class holds it."""

    class Kernel:
        def __call__(self, layer, x):
            return ("kernel", x)

    m, Layer, _ = single(fn=Kernel())
    assert Layer().forward_oot(1) == ("kernel", 1)
    assert Layer.__dict__["forward_oot"] is m.binding("op").fn


def test_a_gate_keeps_the_trampoline():
    def only(self, x, mode="a"):
        return mode

    reg = OpRegistry()
    reg.register_impl(OpImpl("op", "reference.torch", "reference", only, supports={"mode": ("a",)}))
    m = OpManager(registry=reg)

    class Layer:
        forward_oot = dispatch_method("op", manager=m)

    assert Layer().forward_oot(1) == "a"
    assert Layer.__dict__["forward_oot"] is m.binding("op").fn


def test_a_selection_wrapper_takes_the_class_back_and_gives_it_up_again():
    m, Layer, fn = single()
    layer = Layer()
    layer.forward_oot(1)
    seen = []

    def wrapper(op, impl, registry):
        def wrapped(*args, **kwargs):
            seen.append(op)
            return impl.fn(*args, **kwargs)

        return wrapped

    old = wrap_selections(wrapper)
    try:
        assert Layer.__dict__["forward_oot"] is m.binding("op").fn
        assert layer.forward_oot(1) == ("only", 1)
        assert seen == ["op"]
    finally:
        wrap_selections(old)
    assert Layer.__dict__["forward_oot"] is fn


class FakeCustomOp:
    """What vLLM's CustomOp does at construction: bind ``forward_oot`` into
    ``_forward_method`` through ``dispatch_forward``, and call that from ``forward``."""

    def __init__(self):
        self._forward_method = self.dispatch_forward(compile_native=False)

    def dispatch_forward(self, compile_native=False):
        return self.forward_oot

    def forward(self, x):
        return self._forward_method(x)


def test_followed_bound_methods_are_rebound_with_the_class():
    m, _, calls = norm_layer()

    class Layer:
        forward_oot = dispatch_method("rms_norm", manager=m)

    with policy_context(ONLY_FLAGOS):
        Layer().forward_oot(1)
        layer = Layer()
        layer._forward_method = layer.forward_oot  # bound while the class holds the impl
        assert follow_bound_method(layer, "_forward_method", "forward_oot")
        with policy_context(ONLY_REFERENCE):
            assert layer._forward_method.__func__ is impl_fn(m, "reference.torch")
            assert layer._forward_method(1) == "reference"
        assert layer._forward_method(1) == "flagos"
    assert layer._forward_method.__func__ is m.binding("rms_norm").fn
    assert layer._forward_method(1) == "flagos"


def test_follow_bound_method_ignores_what_no_binding_put_on_the_class():
    class Plain:
        def forward_oot(self, x):
            return x

    assert not follow_bound_method(Plain(), "_forward_method", "forward_oot")


def test_vllm_layers_forward_method_follows_the_dispatch():
    """``vllm_fl.registration`` gives each class it registers a ``dispatch_forward`` that has the
    dispatch follow the ``_forward_method`` vLLM binds (here on a stand-in of CustomOp)."""
    from vllm_fl.registration import _follow_forward_method

    m, _, calls = norm_layer()

    class NormFL(FakeCustomOp):
        forward_oot = dispatch_method("rms_norm", manager=m)

    _follow_forward_method(NormFL)
    _follow_forward_method(NormFL)  # idempotent
    with policy_context(ONLY_FLAGOS):
        NormFL().forward_oot(1)
        layer = NormFL()  # built after resolution, as vLLM builds models (resolve_ops)
        assert layer._forward_method.__func__ is impl_fn(m, "default.flagos")
        with policy_context(ONLY_REFERENCE):
            assert layer.forward(1) == "reference"
        assert layer.forward(1) == "flagos"
    assert layer._forward_method.__func__ is NormFL.forward_oot
    assert layer.forward(1) == "flagos"
    assert [tag for tag, _ in calls][-3:] == ["reference", "flagos", "flagos"]


@pytest.mark.parametrize("followed", [True, False])
def test_a_followed_layer_is_not_kept_alive(followed):
    import gc
    import weakref

    m, Layer, fn = single()
    Layer().forward_oot(1)
    layer = Layer()
    layer._forward_method = layer.forward_oot
    if followed:
        follow_bound_method(layer, "_forward_method", "forward_oot")
    ref = weakref.ref(layer)
    del layer
    gc.collect()
    assert ref() is None
    assert m.binding("op")._followed == {}

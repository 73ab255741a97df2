"""Binding: the op's trampoline takes the selected impl's signature, is installed once, follows
policy and registry changes on the next call (also where vLLM bound it), and stays one graph
under torch.compile, with compile_prefer's selection for traced calls."""

import inspect
import threading

import pytest
from dispatch_helpers import SPLIT, act_manager as _act_manager, norm_layer as setup

from vllm_fl.dispatch import (
    OpImpl,
    OpManager,
    OpRegistry,
    SelectionPolicy,
    dispatch_method,
    policy_context,
    reset_global_policy,
    set_global_policy,
)

torch = pytest.importorskip("torch")


def test_trampoline_mirrors_impl_signature():
    """rms_norm is an op of ops.yaml: its trampoline is the generated one, which binds the call
    before any impl runs."""
    from vllm_fl.dispatch import trampolines

    m, Layer, calls = setup()
    Layer().forward_oot(1)
    assert str(inspect.signature(Layer.forward_oot)) == "(self, x, residual=None)"
    assert Layer.forward_oot.__code__.co_filename == trampolines.__file__
    del calls[:]
    with pytest.raises(TypeError):
        Layer().forward_oot()
    assert calls == [] and m.failed_impls() == {}


def test_an_op_outside_the_manifest_mirrors_the_signature_and_a_bad_call_blames_no_impl():
    """A plugin's own op gets the generic trampoline, with the impls' signature for
    introspection; a call that does not fit reaches the impl, and the binding re-raises the
    TypeError as the caller's: no impl is excluded, no other impl tried, the selection kept."""
    m, Layer, calls = setup(op="plugin_norm")
    layer = Layer()
    assert layer.forward_oot(1) == "flagos"
    assert str(inspect.signature(Layer.forward_oot)) == "(self, x, residual=None)"
    for args, kwargs in (((), {}), ((1, 2, 3), {}), ((1,), {"scale": 2})):
        with pytest.raises(TypeError) as ei:
            layer.forward_oot(*args, **kwargs)
        assert not getattr(ei.value, "__notes__", None)  # no other impl was tried
    assert m.failed_impls() == {} and m.resolution_count == 1
    assert layer.forward_oot(1) == "flagos"
    assert [tag for tag, _ in calls] == ["flagos", "flagos"]


def test_policy_change_takes_effect_next_call_also_for_bound_methods():
    m, Layer, calls = setup()
    layer = Layer()
    bound = layer.forward_oot  # what vLLM's CustomOp stores in _forward_method at __init__
    assert bound(1) == "flagos"
    with policy_context(SelectionPolicy.from_dict(prefer="reference")):
        assert bound(1) == "reference"
        assert layer.forward_oot(1) == "reference"
        assert m.used_impls() == {"rms_norm": "reference.torch"}
    assert bound(1) == "flagos"
    set_global_policy(SelectionPolicy.from_dict(per_op_order={"rms_norm": ["reference"]}))
    assert layer.forward_oot(1) == "reference"
    reset_global_policy()
    assert layer.forward_oot(1) == "flagos"


def test_reset_global_policy_rereads_env(clean_dispatch_env):
    m, Layer, _ = setup()
    layer = Layer()
    assert layer.forward_oot(1) == "flagos"
    clean_dispatch_env.setenv("VLLM_FL_PREFER", "reference")
    assert layer.forward_oot(1) == "flagos"
    reset_global_policy()
    assert layer.forward_oot(1) == "reference"


def test_registry_change_takes_effect_next_call():
    m, Layer, _ = setup()
    layer = Layer()
    assert layer.forward_oot(1) == "flagos"
    m.registry.register_impl(
        OpImpl(
            "rms_norm",
            "vendor.x",
            "vendor",
            lambda self, x, residual=None: "x",
            vendor="x",
            priority=200,
        )
    )
    with policy_context(SelectionPolicy.from_dict(prefer="vendor")):
        assert layer.forward_oot(1) == "x"
    m.registry.unregister("rms_norm", "default.flagos")
    assert layer.forward_oot(1) == "x"  # vendor.x now first in the flagos order's vendor group


def test_sixteen_threads_first_call_one_resolution():
    m, Layer, _ = setup()
    layer = Layer()
    barrier = threading.Barrier(16)
    results, errors = [], []

    def work():
        barrier.wait()
        try:
            results.append(layer.forward_oot(1))
        except Exception as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and results == ["flagos"] * 16
    assert m.resolution_count == 1


# --------------------------------------------------------------------------- torch.compile


def test_torch_compile_fullgraph_no_graph_break():
    torch = pytest.importorskip("torch")

    def ref_norm(self, x, residual=None):
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
        return y if residual is None else (y, residual)

    def bad_norm(self, x, residual=None):  # selected first but unavailable
        raise AssertionError("must not run")

    reg = OpRegistry()
    reg.register_many(
        [
            OpImpl("rms_norm", "default.flagos", "flagos", bad_norm, available=lambda: False),
            OpImpl("rms_norm", "reference.torch", "reference", ref_norm),
        ]
    )
    m = OpManager(registry=reg)

    class Norm(torch.nn.Module):
        forward_oot = dispatch_method("rms_norm", manager=m)

        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.rand(8))
            self.eps = 1e-6
            self._forward_method = self.forward_oot  # as vLLM's CustomOp does

        def forward(self, x):
            return self._forward_method(x)

    mod = Norm()
    m.resolve_all()
    x = torch.randn(4, 8)
    expected = ref_norm(mod, x)
    torch._dynamo.reset()
    compiled = torch.compile(mod, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(x), expected)
    explanation = torch._dynamo.explain(mod)(x)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1
    # strict and non-strict compile the same way
    with policy_context(SelectionPolicy.from_dict(strict=True)):
        m.resolve_all()
        torch._dynamo.reset()
        torch.testing.assert_close(torch.compile(mod, fullgraph=True, backend="eager")(x), expected)


def test_compiled_module_follows_policy_change():
    torch = pytest.importorskip("torch")
    reg = OpRegistry()
    reg.register_many(
        [
            OpImpl("act", "default.flagos", "flagos", lambda self, x: x * 2),
            OpImpl("act", "reference.torch", "reference", lambda self, x: x * 3),
        ]
    )
    m = OpManager(registry=reg)

    class Act(torch.nn.Module):
        forward_oot = dispatch_method("act", manager=m)

        def forward(self, x):
            return self.forward_oot(x)

    mod = Act()
    m.resolve_all()
    torch._dynamo.reset()
    compiled = torch.compile(mod, fullgraph=True, backend="eager")
    x = torch.ones(3)
    assert compiled(x).tolist() == [2.0, 2.0, 2.0]
    with policy_context(SelectionPolicy.from_dict(prefer="reference")):
        m.resolve_all()
        assert compiled(x).tolist() == [3.0, 3.0, 3.0]  # guard on the installed impl: recompiled
    m.resolve_all()
    assert compiled(x).tolist() == [2.0, 2.0, 2.0]


def test_compile_before_resolution_is_correct_and_later_fullgraph():
    """Tracing an op nobody resolved yet costs a graph break (the resolution) but stays correct;
    once resolved, fullgraph compiles."""
    torch = pytest.importorskip("torch")
    reg = OpRegistry()
    reg.register_impl(OpImpl("act2", "reference.torch", "reference", lambda self, x: x + 1))
    m = OpManager(registry=reg)

    class Act(torch.nn.Module):
        forward_oot = dispatch_method("act2", manager=m)

        def forward(self, x):
            return self.forward_oot(x) * 2

    torch._dynamo.reset()
    x = torch.zeros(2)
    assert torch.compile(Act(), backend="eager")(x).tolist() == [2.0, 2.0]
    assert m.used_impls() == {"act2": "reference.torch"}
    torch._dynamo.reset()
    assert torch.compile(Act(), fullgraph=True, backend="eager")(x).tolist() == [2.0, 2.0]


def test_traced_calls_use_compile_prefer_and_eager_calls_prefer():
    m, Act, calls = _act_manager()
    mod, x = Act(), torch.ones(3)
    with policy_context(SPLIT):
        m.resolve_all()
        torch._dynamo.reset()
        compiled = torch.compile(mod, fullgraph=True, backend="eager")
        assert compiled(x).tolist() == [3.0] * 3
        assert mod(x).tolist() == [2.0] * 3
        assert compiled(x).tolist() == [3.0] * 3
        assert m.used_impls() == {"act": "default.flagos"}
        assert m.used_impls(traced=True) == {"act": "reference.torch"}
    # without the split the trampoline has no branch, and both modes share one selection
    m.resolve_all()
    assert "_is_compiling" not in Act.forward_oot.__code__.co_names
    assert mod(x).tolist() == [2.0] * 3
    assert compiled(x).tolist() == [2.0] * 3
    assert m.used_impls(traced=True) == {"act": "default.flagos"}


def test_per_op_order_applies_in_both_modes():
    m, Act, _ = _act_manager()
    mod, x = Act(), torch.ones(3)
    policy = SPLIT.replace(per_op_order={"act": ["vendor"]})
    with policy_context(policy):
        m.resolve_all()
        torch._dynamo.reset()
        assert torch.compile(mod, fullgraph=True, backend="eager")(x).tolist() == [5.0] * 3
        assert mod(x).tolist() == [5.0] * 3


def test_eager_fallback_leaves_the_traced_selection_alone():
    m, Act, calls = _act_manager(fail_eager=True)
    mod, x = Act(), torch.ones(3)
    with policy_context(SPLIT):
        m.resolve_all()
        assert mod(x).tolist() == [5.0] * 3  # flagos failed, next in the flagos order: vendor
        assert m.used_impls() == {"act": "vendor.cuda"}
        assert m.used_impls(traced=True) == {"act": "reference.torch"}
        torch._dynamo.reset()
        assert torch.compile(mod, fullgraph=True, backend="eager")(x).tolist() == [3.0] * 3

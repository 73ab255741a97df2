"""dispatch_method, runtime policy/registry changes, concurrency, resolve_all, torch.compile."""

import threading

import pytest

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


def setup(op="rms_norm"):
    calls = []

    def mk(tag):
        def norm(self, x, residual=None):
            calls.append((tag, self))
            return tag if residual is None else (tag, residual)

        return norm

    reg = OpRegistry()
    reg.register_many(
        [
            OpImpl(op, "default.flagos", "flagos", mk("flagos")),
            OpImpl(op, "reference.torch", "reference", mk("reference")),
        ]
    )
    m = OpManager(registry=reg)

    class Layer:
        forward_oot = dispatch_method(op, manager=m)

    return m, Layer, calls


def test_dispatch_method_binds_self_and_passes_args():
    m, Layer, calls = setup()
    layer = Layer()
    assert layer.forward_oot(1) == "flagos"
    assert layer.forward_oot(1, 2) == ("flagos", 2)
    assert layer.forward_oot(1, residual=3) == ("flagos", 3)
    assert calls[0] == ("flagos", layer)
    # after the first access the class attribute is a plain function (no descriptor per call)
    assert type(Layer.__dict__["forward_oot"]).__name__ == "function"
    assert m.call_as_method("rms_norm", layer, 1) == "flagos"


def test_trampoline_mirrors_impl_signature():
    import inspect

    m, Layer, _ = setup()
    Layer().forward_oot(1)
    assert str(inspect.signature(Layer.forward_oot)) == "(self, x, residual=None)"
    with pytest.raises(TypeError):
        Layer().forward_oot()


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


def test_resolve_all_and_used_impls():
    m, Layer, calls = setup()
    m.registry.register_impl(
        OpImpl("gpu_only", "default.flagos", "flagos", lambda: 1, available=lambda: False)
    )
    assert m.resolve_all() == {"gpu_only": None, "rms_norm": "default.flagos"}
    assert m.used_impls() == {"rms_norm": "default.flagos"}
    assert calls == []  # resolving runs nothing
    n = m.resolution_count
    Layer().forward_oot(1)
    assert m.resolution_count == n


def test_op_without_self_through_call():
    reg = OpRegistry()
    reg.register_impl(
        OpImpl(
            "attention_backend", "reference.x", "reference", lambda use_mla=False: f"mla={use_mla}"
        )
    )
    m = OpManager(registry=reg)
    assert m.call("attention_backend") == "mla=False"
    assert m.call("attention_backend", use_mla=True) == "mla=True"
    assert m.resolve("attention_backend")(True) == "mla=True"


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


def test_with_strict_mode_context():
    from vllm_fl.dispatch import get_policy, with_strict_mode

    reg = OpRegistry()

    def broken(self, x, residual=None):
        raise KeyError("k")

    reg.register_many(
        [
            OpImpl("op", "default.flagos", "flagos", broken),
            OpImpl("op", "reference.torch", "reference", lambda self, x, residual=None: "ref"),
        ]
    )
    m = OpManager(registry=reg)
    with with_strict_mode():
        assert get_policy().strict and get_policy().sources["strict"] == "with_strict_mode"
        with pytest.raises(KeyError):
            m.call("op", None, 1)
    assert not get_policy().strict
    assert m.call("op", None, 1) == "ref"


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

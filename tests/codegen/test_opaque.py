"""The generated register_ops of an opaque backend, run for real: custom ops defined once,
adapters restoring the return form, fakes (the reference) letting torch.compile trace it whole;
and the small runtime module behind them, ``vllm_fl.dispatch.opaque``."""

from __future__ import annotations

import shutil
import sys
from types import SimpleNamespace

import pytest
import torch

from codegen_helpers import FIXTURES
from vllm_fl.dispatch import OpRegistry, opaque


@pytest.fixture(scope="module")
def fast_registry(tmp_path_factory):
    root = tmp_path_factory.mktemp("opaque") / "tree"
    shutil.copytree(FIXTURES / "expected", root)
    sys.path.insert(0, str(root))
    try:
        from fxpkg.fast import register_ops

        registry = OpRegistry()
        register_ops.register(registry)
        register_ops.register(OpRegistry())  # a second registration defines nothing twice
        yield registry
    finally:
        sys.path.remove(str(root))
        for name in [n for n in sys.modules if n == "fxpkg" or n.startswith("fxpkg.")]:
            del sys.modules[name]


def _layer():
    generator = torch.Generator().manual_seed(0)
    return SimpleNamespace(weight=torch.randn(16, generator=generator), variance_epsilon=1e-6)


def test_opaque_backend_registers_custom_op_adapters(fast_registry):
    impl = fast_registry.get_impl("rms_norm", "default.flagos")
    assert impl.priority == 150 and impl.is_available()
    assert impl.fn.__module__ == "fxpkg.fast.register_ops"
    assert "vllm_fl::fast_rms_norm" in opaque.defined()
    assert hasattr(torch.ops.vllm_fl, "fast_rms_norm")
    # an op returning str is registered as the plain impl, not wrapped
    pick = fast_registry.get_impl("pick_backend", "default.flagos")
    assert pick.fn.__module__ == "fxpkg.fast.impl.attention"


def test_adapter_restores_each_return_form(fast_registry):
    from fxpkg.reference.impl.norm import rms_norm as reference

    fn = fast_registry.get_impl("rms_norm", "default.flagos").fn
    layer, x, residual = _layer(), torch.randn(3, 16), torch.randn(3, 16)
    out = fn(layer, x)
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out, reference(layer, x))
    expected = reference(layer, x, residual)
    out, summed = fn(layer, x.clone(), residual.clone())
    torch.testing.assert_close(out, expected[0])
    torch.testing.assert_close(summed, expected[1])


def test_custom_op_traces_whole_under_torch_compile(fast_registry):
    fn = fast_registry.get_impl("rms_norm", "default.flagos").fn
    layer = _layer()
    compiled = torch.compile(lambda x, r: fn(layer, x, r), fullgraph=True, backend="eager")
    x, residual = torch.randn(3, 16), torch.randn(3, 16)
    x0, residual0 = x.clone(), residual.clone()
    out, summed = compiled(x, residual)
    # under the trace the functional impl runs (through the custom op): nothing is overwritten
    assert torch.equal(x, x0) and torch.equal(residual, residual0)
    torch.testing.assert_close(summed, x + residual)
    torch.testing.assert_close(out, fn(layer, x.clone(), residual.clone())[0])


def test_adapter_runs_the_eager_variant_in_place_outside_a_trace(fast_registry):
    from fxpkg.fast.impl import norm
    from fxpkg.reference.impl.norm import rms_norm as reference

    fn = fast_registry.get_impl("rms_norm", "default.flagos").fn
    assert fn.eager is norm.rms_norm_inplace and fn.functional is norm.rms_norm
    layer, x, residual = _layer(), torch.randn(3, 16), torch.randn(3, 16)
    expected = reference(layer, x, residual)
    out, summed = fn(layer, x, residual)
    assert out is x and summed is residual  # overwritten and returned, as vLLM's kernels do
    torch.testing.assert_close(out, expected[0])
    torch.testing.assert_close(summed, expected[1])


def test_non_opaque_backend_gets_an_eager_adapter(generated):
    text = (generated / "fxpkg/vendor/acme/register_ops.py").read_text()
    assert "return _acme_norm.rms_norm_inplace(self, x, residual)" in text
    assert "return _acme_norm.rms_norm(self, x, residual)" in text
    assert "rms_norm.eager = _acme_norm.rms_norm_inplace" in text


def test_stub_kernel_fails_loudly(fast_registry):
    fn = fast_registry.get_impl("silu_and_mul", "default.flagos").fn
    with pytest.raises(NotImplementedError, match="fast silu_and_mul: write the kernel here"):
        fn(SimpleNamespace(), torch.randn(2, 8))


def test_flatten_drops_only_trailing_nones():
    a, b = torch.zeros(1), torch.ones(1)
    assert opaque.flatten(a) == [a]
    assert opaque.flatten((a, b)) == [a, b]
    assert opaque.flatten((a, None)) == [a]
    assert opaque.flatten(None) == []
    with pytest.raises(TypeError, match="returned None before a tensor"):
        opaque.flatten((None, a))


def test_attrs_is_a_plain_namespace():
    ns = opaque.attrs(weight=1, variance_epsilon=2.0)
    assert (ns.weight, ns.variance_epsilon) == (1, 2.0)


def test_define_is_idempotent_and_thread_safe():
    import threading

    def kernel(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    def fake(x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)

    threads = [
        threading.Thread(target=opaque.define, args=("vllm_fl::test_double", kernel, fake))
        for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert opaque.defined().count("vllm_fl::test_double") == 1
    torch.testing.assert_close(torch.ops.vllm_fl.test_double(torch.ones(2)), torch.full((2,), 2.0))

"""``vllm_fl.dispatch.runtime.registration``, the runtime behind every generated register_ops:
the table's checks, the adapters and custom ops it registers from a row, and the functions its
custom ops run on (``flatten``, ``attrs``, ``define``). The generated adapters themselves are
tested on the generator's fixture (tests/codegen/test_opaque.py)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
import torch

from vllm_fl.dispatch import BackendImplKind, OpRegistry
from vllm_fl.dispatch.runtime import registration
from vllm_fl.dispatch.runtime.registration import (
    CustomOp,
    DeclaredBackend,
    Impl,
    Registrations,
)

UNIT = DeclaredBackend("unit", "vendor.unit", BackendImplKind.VENDOR, priority=100, vendor="unit")


def _rope(self, q: torch.Tensor, k: torch.Tensor | None = None):
    """Returns ``(q * scale, k * scale or None)``: a ``(Tensor, Tensor?)`` return."""
    return q * self.scale, None if k is None else k * self.scale


# The three functions the generator writes into register_ops.py for such a row (the adapter, the
# custom op's kernel and its fake), as it writes them.
def unit_rope(
    self, q: torch.Tensor, k: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    if not torch.compiler.is_compiling():
        return _rope(self, q, k)
    out = torch.ops.vllm_fl.unit_unit_rope(q, k, self.scale)
    return (out[0], None) if len(out) == 1 else (out[0], out[1])


def _unit_rope_kernel(q: torch.Tensor, k: torch.Tensor | None, scale: float) -> list[torch.Tensor]:
    return registration.flatten(_rope(registration.attrs(scale=scale), q, k))


def _rope_row(op: str) -> Impl:
    return Impl(
        op,
        _rope,
        adapter=unit_rope,
        custom_op=CustomOp(_unit_rope_kernel, _unit_rope_kernel),
    )


def test_a_tuple_return_with_an_optional_tail_survives_the_custom_op():
    table = Registrations("unit_register_ops", UNIT, (_rope_row("unit_rope"),))
    registry = OpRegistry()
    table.register(registry)
    impl = registry.get_impl("unit_rope", "vendor.unit")
    assert (impl.kind, impl.vendor, impl.priority, impl.available) == (
        BackendImplKind.VENDOR,
        "unit",
        100,
        None,
    )
    fn, layer, q, k = impl.fn, SimpleNamespace(scale=2.0), torch.ones(3), torch.ones(2)
    assert fn is unit_rope and fn.functional is _rope and not hasattr(fn, "eager")
    assert str(torch.ops.vllm_fl.unit_unit_rope.default._schema) == (
        "vllm_fl::unit_unit_rope(Tensor q, Tensor? k, float scale) -> Tensor[]"
    )
    compiled = torch.compile(lambda q, k: fn(layer, q, k), fullgraph=True, backend="eager")
    out_q, out_k = compiled(q, None)
    assert out_k is None and torch.equal(out_q, q * 2)
    out_q, out_k = compiled(q, k)
    assert torch.equal(out_q, q * 2) and torch.equal(out_k, k * 2)
    out_q, out_k = fn(layer, q)  # outside a trace: the impl itself, its return as is
    assert out_k is None and torch.equal(out_q, q * 2)


def test_rows_are_checked_when_the_table_is_built():
    for name in ("class", "x-y", ""):
        with pytest.raises(ValueError, match="invalid op name"):
            Impl(name, _rope)
    with pytest.raises(ValueError, match="has an eager variant or a custom op but no adapter"):
        Impl("a", _rope, custom_op=CustomOp(_unit_rope_kernel, _unit_rope_kernel))
    with pytest.raises(ValueError, match="has an eager variant or a custom op but no adapter"):
        Impl("a", _rope, eager=_rope)
    with pytest.raises(ValueError, match="lists an op twice"):
        Registrations("m", UNIT, (Impl("a", _rope), Impl("a", _rope)))


def test_availability_combines_the_backends_and_the_rows():
    def probe() -> bool:
        return True

    backend = DeclaredBackend(
        "unit",
        "vendor.unit",
        BackendImplKind.VENDOR,
        priority=100,
        vendor="unit",
        requires=("math",),
        probe=probe,
    )
    table = Registrations("m", backend, (Impl("a", _rope), Impl("b", _rope, requires=("json",))))
    registry = OpRegistry()
    table.register(registry)
    a, b = registry.get_impl("a", "vendor.unit"), registry.get_impl("b", "vendor.unit")
    assert repr(a.available.probes[0]) == "Probe(requires=('math',), device=None)"
    assert a.available.probes[1] is probe
    assert b.available.probes[0] is a.available  # the backend's check, then the row's
    assert repr(b.available.probes[1]) == "Probe(requires=('json',), device=None)"
    assert a.fn is _rope and a.is_available() and b.is_available()
    assert (
        DeclaredBackend("r", "reference.torch", BackendImplKind.REFERENCE, 50).availability()
        is None
    )


def test_flatten_drops_only_trailing_nones():
    a, b = torch.zeros(1), torch.ones(1)
    assert registration.flatten(a) == [a]
    assert registration.flatten((a, b)) == [a, b]
    assert registration.flatten((a, None)) == [a]
    assert registration.flatten(None) == []
    with pytest.raises(TypeError, match="returned None before a tensor"):
        registration.flatten((None, a))


def test_attrs_is_a_plain_namespace():
    ns = registration.attrs(weight=1, variance_epsilon=2.0)
    assert (ns.weight, ns.variance_epsilon) == (1, 2.0)


def test_define_is_idempotent_and_thread_safe():
    def kernel(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    def fake(x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)

    threads = [
        threading.Thread(target=registration.define, args=("vllm_fl::test_double", kernel, fake))
        for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert registration.defined().count("vllm_fl::test_double") == 1
    assert registration.definition("vllm_fl::test_double")._init_fn is kernel
    torch.testing.assert_close(torch.ops.vllm_fl.test_double(torch.ones(2)), torch.full((2,), 2.0))

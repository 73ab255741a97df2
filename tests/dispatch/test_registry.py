"""OpRegistry: registration, duplicates, atomicity, threads and clear()."""

import threading

import pytest
from dispatch_helpers import plugin_impl as _impl

from vllm_fl.dispatch import OpImpl, OpManager, OpRegistry, dispatch_method
from vllm_fl.dispatch.discovery import load_plugin_module


def f(self, x):
    return x


def test_registry_register_query_and_duplicate_names_both():
    reg = OpRegistry()
    a = OpImpl("rms_norm", "default.flagos", "flagos", f)
    reg.register_impl(a)
    reg.register_many([OpImpl("silu", "reference.torch", "reference", f)])
    assert reg.list_operators() == ["rms_norm", "silu"]
    assert reg.get_implementations("rms_norm") == [a]
    assert reg.get_implementations("nope") == []

    def other(self, x):
        return x

    with pytest.raises(ValueError) as ei:
        reg.register_impl(OpImpl("rms_norm", "default.flagos", "flagos", other))
    msg = str(ei.value)
    assert "duplicate implementation 'default.flagos' for op 'rms_norm'" in msg
    assert (
        "test_registry.f" in msg
        and "test_registry.test_registry_register_query_and_duplicate_names_both.<locals>.other"
        in msg
    )


def test_registry_register_many_is_atomic():
    reg = OpRegistry()
    good = OpImpl("a", "x", "reference", f)
    with pytest.raises(ValueError, match="duplicate"):
        reg.register_many([good, OpImpl("a", "x", "reference", f)])
    assert reg.get_implementations("a") == []


def test_registry_thread_safe():
    reg = OpRegistry()
    barrier = threading.Barrier(8)

    def work(t):
        barrier.wait()
        for i in range(200):
            reg.register_impl(OpImpl(f"op{i % 10}", f"impl{t}_{i}", "reference", f))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(reg) == 8 * 200
    assert len(reg.list_operators()) == 10


def test_registry_clear_removes_everything_and_managers_re_resolve(plugin_module):
    reg = OpRegistry()
    reg.register_impl(OpImpl("op", "reference.a", "reference", lambda x: "a"))
    m = OpManager(reg)

    class Layer:
        forward_oot = dispatch_method("op", manager=m)

    assert m.call("op", 1) == "a"
    gen = reg.generation
    reg.clear()
    assert reg.list_operators() == [] and len(reg) == 0 and reg.generation > gen
    reg.register_impl(OpImpl("op", "reference.b", "reference", lambda x: "b"))
    assert m.call("op", 1) == "b"
    # Plugins loaded before the clear register again into the cleared registry.
    name = plugin_module("clear_plugin", register=lambda r: r.register_impl(_impl("plugged")))
    assert load_plugin_module(reg, name) and "plugged" in reg.list_operators()
    assert load_plugin_module(reg, name)  # idempotent: no duplicate error
    reg.clear()
    assert load_plugin_module(reg, name) and reg.list_operators() == ["plugged"]

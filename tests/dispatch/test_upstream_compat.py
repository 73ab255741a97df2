"""Backends and plugins written for upstream vllm-plugin-FL load unchanged."""

from __future__ import annotations

import sys
import types

import pytest

from vllm_fl.dispatch import OpImpl, OpManager, OpRegistry, dispatch_method
from vllm_fl.dispatch.discovery import load_plugin_module, load_plugins


def test_fn_is_available_false_makes_the_impl_unavailable():
    def flagos(x):
        return "flagos"

    def ref(x):
        return "reference"

    flagos._is_available = lambda: False
    reg = OpRegistry()
    reg.register_many(
        [
            OpImpl("op", "default.flagos", "flagos", flagos),
            OpImpl("op", "reference.torch", "reference", ref),
        ]
    )
    m = OpManager(reg)
    assert m.call("op", 1) == "reference"
    ok, why = reg.get_impl("op", "default.flagos").check_available()
    assert not ok and why == "fn._is_available() returned False"


def test_fn_is_available_is_read_at_each_check_and_may_raise():
    def flagos(x):
        return "flagos"

    impl = OpImpl("op", "default.flagos", "flagos", flagos)
    assert impl.is_available()
    flagos._is_available = lambda: True  # attached after the OpImpl was built
    assert impl.is_available()

    def broken():
        raise RuntimeError("no device")

    flagos._is_available = broken
    assert impl.check_available() == (
        False,
        "fn._is_available() raised RuntimeError: no device",
    )
    flagos._is_available = "yes"
    ok, why = impl.check_available()
    assert not ok and "not a zero-argument callable" in why


def test_available_and_fn_is_available_must_both_agree():
    def flagos(x):
        return "flagos"

    flagos._is_available = lambda: False
    impl = OpImpl("op", "default.flagos", "flagos", flagos, available=lambda: True)
    assert not impl.is_available()
    flagos._is_available = lambda: True
    assert impl.is_available()
    assert not OpImpl(
        "op", "default.flagos", "flagos", flagos, available=lambda: False
    ).is_available()


def test_bound_method_impl_carries_its_function_attribute():
    class Backend:
        def rms(self, x):
            return "backend"

    Backend.rms._is_available = lambda: False
    impl = OpImpl("op", "vendor.x", "vendor", Backend().rms, vendor="x")
    assert not impl.is_available()


@pytest.fixture
def plugin_module(monkeypatch):
    """A module name -> a fresh module in sys.modules with the given attributes."""

    def make(name: str, **attrs):
        mod = types.ModuleType(name)
        for k, v in attrs.items():
            setattr(mod, k, v)
        monkeypatch.setitem(sys.modules, name, mod)
        return name

    return make


def _impl(op: str):
    return OpImpl(op, "reference.plugin", "reference", lambda x: op)


def test_plugin_module_with_upstream_hook_name_is_loaded(plugin_module):
    name = plugin_module(
        "upstream_style_plugin", vllm_fl_register=lambda reg: reg.register_impl(_impl("up_op"))
    )
    reg = OpRegistry()
    errors: list = []
    load_plugins(reg, [name], errors)
    assert errors == []
    assert reg.list_operators() == ["up_op"]


def test_plugin_module_with_both_hooks_runs_only_vllm_fl_register(plugin_module):
    calls = []
    name = plugin_module(
        "both_hooks_plugin",
        vllm_fl_register=lambda reg: calls.append("vllm_fl_register"),
        register=lambda reg: calls.append("register"),
    )
    assert load_plugin_module(OpRegistry(), name)
    assert calls == ["vllm_fl_register"]


def test_plugin_module_without_a_hook_names_both(plugin_module):
    name = plugin_module("hookless_plugin")
    errors: list = []
    assert not load_plugin_module(OpRegistry(), name, errors)
    assert "vllm_fl_register(registry) or register(registry)" in errors[0][1]


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

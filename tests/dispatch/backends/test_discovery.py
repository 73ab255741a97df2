"""Plugins: VLLM_FL_PLUGIN_MODULES, the entry-point group and the hook names (upstream
vllm-plugin-FL's ``vllm_fl_register`` too)."""

import logging
import sys

import pytest
from dispatch_helpers import module, plugin_impl as _impl

import vllm_fl.dispatch as d
from vllm_fl.dispatch import OpImpl, OpRegistry
from vllm_fl.dispatch import discovery
from vllm_fl.dispatch.discovery import load_plugin_module, load_plugins


def fn(self, x):
    return ("plugin", x)


@pytest.fixture
def fake_modules(monkeypatch):
    def install(**mods):
        for name, mod in mods.items():
            monkeypatch.setitem(sys.modules, name, mod)

    return install


def test_plugin_modules_env_failing_plugin_warns_others_load(
    clean_dispatch_env, fake_modules, no_entry_points, fresh_default, caplog_dispatch
):
    def good(reg):
        reg.register_impl(OpImpl("plug_op", "vendor.acme", "vendor", fn, vendor="acme"))

    def bad(reg):
        raise RuntimeError("cannot reach device")

    fake_modules(
        p_good=module("p_good", good), p_bad=module("p_bad", bad), p_none=module("p_none", None)
    )
    clean_dispatch_env.setenv("VLLM_FL_PLUGIN_MODULES", "p_bad, p_missing_xyz, p_none, p_good")
    d.reset_global_policy()
    m = d.get_default_manager()
    assert m.registry.get_impl("plug_op", "vendor.acme") is not None
    assert d.call_op("plug_op", None, 1) == ("plugin", 1)
    warns = [r.getMessage() for r in caplog_dispatch.records if r.levelno == logging.WARNING]
    assert any(
        "Plugin module 'p_bad' failed to load: RuntimeError: cannot reach device" in w
        for w in warns
    )
    assert any(
        "Plugin module 'p_missing_xyz' failed to load: ModuleNotFoundError" in w for w in warns
    )
    assert any("Plugin module 'p_none' failed to load: TypeError" in w for w in warns)
    assert [name for name, _ in m.load_errors if name.startswith("module")] == [
        "module 'p_bad'",
        "module 'p_missing_xyz'",
        "module 'p_none'",
    ]


def test_entry_points_group(monkeypatch, caplog_dispatch):
    class EP:
        def __init__(self, name, obj):
            self.name, self.value, self._obj = name, f"{name}:register", obj

        def load(self):
            if isinstance(self._obj, Exception):
                raise self._obj
            return self._obj

    def reg_fn(reg):
        reg.register_impl(OpImpl("ep_op", "reference.ep", "reference", fn))

    seen = {}

    def fake_eps(group):
        seen["group"] = group
        return [
            EP("a_broken", ImportError("no such thing")),
            EP("b_fn", reg_fn),
            EP(
                "c_mod",
                module(
                    "c",
                    lambda r: r.register_impl(
                        OpImpl("ep_op", "vendor.c", "vendor", fn, vendor="c")
                    ),
                ),
            ),
        ]

    monkeypatch.setattr(discovery.metadata, "entry_points", fake_eps)
    reg = OpRegistry()
    errors = []
    assert discovery.load_entry_points(reg, errors) == ["b_fn", "c_mod"]
    assert seen["group"] == "vllm_fl.plugin"
    assert [i.impl_id for i in reg.get_implementations("ep_op")] == ["reference.ep", "vendor.c"]
    assert "entry point 'a_broken'" in errors[0][0] and "ImportError: no such thing" in errors[0][1]
    assert (
        "Plugin entry point 'a_broken' (a_broken:register) failed to load" in caplog_dispatch.text
    )
    # idempotent: loading again registers nothing twice (no duplicate error)
    assert discovery.load_entry_points(reg, []) == ["b_fn", "c_mod"]
    assert len(reg) == 2


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

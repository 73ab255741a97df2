"""Plugins (VLLM_FL_PLUGIN_MODULES, entry points), the default manager and its built-ins."""

import logging
import sys
import types

import pytest

import vllm_fl.dispatch as d
import vllm_fl.dispatch.backends.flaggems  # noqa: F401 - subscribes the FlagGems op list writer
from vllm_fl.dispatch import OpImpl, OpRegistry, discovery


def fn(self, x):
    return ("plugin", x)


def module(name, register):
    mod = types.ModuleType(name)
    if register is not None:
        mod.register = register
    return mod


@pytest.fixture
def fake_modules(monkeypatch):
    def install(**mods):
        for name, mod in mods.items():
            monkeypatch.setitem(sys.modules, name, mod)

    return install


@pytest.fixture
def no_entry_points(monkeypatch):
    monkeypatch.setattr(discovery.metadata, "entry_points", lambda group: [])


@pytest.fixture
def fresh_default():
    d.reset_default_manager()
    yield
    d.reset_default_manager()


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


def test_default_manager_registers_builtins(monkeypatch, no_entry_points, fresh_default):
    """Against a fake generated `backends` module, so the test does not depend on the real one."""
    calls = []

    def reg_ref(reg):
        calls.append("ref")
        reg.register_impl(OpImpl("rms_norm", "reference.torch", "reference", fn))

    def reg_gems(reg):
        calls.append("gems")
        reg.register_impl(
            OpImpl("rms_norm", "default.flagos", "flagos", fn, available=lambda: False)
        )

    def reg_broken(reg):
        raise ImportError("torch_npu")

    monkeypatch.setitem(
        sys.modules,
        "vllm_fl.dispatch.backends",
        types.SimpleNamespace(BUILTIN_BACKENDS=("fake_gems", "fake_broken", "fake_ref")),
    )
    monkeypatch.setitem(
        sys.modules, "fake_gems.register_ops", module("fake_gems.register_ops", reg_gems)
    )
    monkeypatch.setitem(
        sys.modules, "fake_broken.register_ops", module("fake_broken.register_ops", reg_broken)
    )
    monkeypatch.setitem(
        sys.modules, "fake_ref.register_ops", module("fake_ref.register_ops", reg_ref)
    )
    monkeypatch.setitem(sys.modules, "fake_gems", module("fake_gems", None))
    monkeypatch.setitem(sys.modules, "fake_broken", module("fake_broken", None))
    monkeypatch.setitem(sys.modules, "fake_ref", module("fake_ref", None))
    m = d.get_default_manager()
    assert d.get_default_manager() is m
    assert calls == ["gems", "ref"]
    assert m.load_errors == [("fake_broken", "ImportError: torch_npu")]
    assert d.resolve_op("rms_norm") is fn
    assert d.call_method_op("rms_norm", "layer", 2) == ("plugin", 2)
    assert d.used_impls() == {"rms_norm": "reference.torch"}

    class Layer:
        forward_oot = d.dispatch_method("rms_norm")

    assert Layer().forward_oot(3) == ("plugin", 3)
    d.reset_default_manager()
    assert d.get_default_manager() is not m and calls == ["gems", "ref", "gems", "ref"]
    assert Layer().forward_oot(4) == ("plugin", 4)  # the same class keeps working


def test_flaggems_oplist_written_for_default_manager(
    clean_dispatch_env, tmp_path, no_entry_points, fresh_default, monkeypatch
):
    path = tmp_path / "ops.txt"
    clean_dispatch_env.setenv("FLAGGEMS_ENABLE_OPLIST_PATH", str(path))
    d.reset_global_policy()
    monkeypatch.setattr(
        "vllm_fl.dispatch.builtin_backends.register_builtins", lambda reg, errors=None: []
    )
    m = d.get_default_manager()
    m.registry.register_many(
        [
            OpImpl("silu_and_mul", "default.flagos", "flagos", lambda x: x),
            OpImpl("rms_norm", "default.flagos", "flagos", lambda x: x),
            OpImpl("rms_norm", "reference.torch", "reference", lambda x: -x),
        ]
    )
    assert not path.exists()
    d.call_op("rms_norm", 1)
    assert path.read_text() == "rms_norm\n"
    d.call_op("silu_and_mul", 1)
    assert path.read_text() == "rms_norm\nsilu_and_mul\n"
    with d.with_preference("reference"):
        assert d.call_op("rms_norm", 1) == -1
        assert path.read_text() == "silu_and_mul\n"


def test_dispatch_debug_logs_resolution(clean_dispatch_env, caplog_dispatch):
    clean_dispatch_env.setenv("VLLM_FL_DISPATCH_DEBUG", "1")
    d.reset_global_policy()
    reg = OpRegistry()
    reg.register_many(
        [
            OpImpl("op", "default.flagos", "flagos", fn, available=lambda: False),
            OpImpl("op", "reference.torch", "reference", fn),
        ]
    )
    d.OpManager(registry=reg).call("op", None, 1)
    rec = [r for r in caplog_dispatch.records if "resolved" in r.getMessage()]
    assert rec and rec[0].levelno == logging.INFO
    assert "candidates [reference.torch]" in rec[0].getMessage()
    assert "'default.flagos' unavailable: available() returned False" in rec[0].getMessage()

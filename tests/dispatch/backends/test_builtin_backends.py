"""The built-in backends register into the default manager; one that fails is a load error."""

import sys
import types

from dispatch_helpers import module

import vllm_fl.dispatch as d
from vllm_fl.dispatch import OpImpl


def fn(self, x):
    return ("plugin", x)


def test_default_manager_registers_builtins(monkeypatch, no_entry_points, fresh_default):
    """Against a fake list of built-in backends, so the test does not depend on the real one."""
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

    monkeypatch.setattr(
        "vllm_fl.dispatch.builtin.BUILTIN_BACKENDS",
        ("fake_gems", "fake_broken", "fake_ref"),
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

"""The default manager's API: dispatch_method on a layer class, and its backends' selection
listeners."""

import pytest
from dispatch_helpers import norm_layer as setup

import vllm_fl.dispatch as d
from vllm_fl.dispatch import OpImpl
from vllm_fl.dispatch.backend import Backend


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


@pytest.fixture
def listener(monkeypatch):
    """Built-ins of one backend whose selection listener records (manager, ops in use)."""
    seen = []

    def record(manager):
        seen.append((manager, sorted(i.op_name for i in manager.impls_in_use())))

    backend = Backend("fake", selection_listeners=(record,))

    def register(reg, errors=None):
        with reg.registering_for(backend):
            reg.register_many(
                [
                    OpImpl("rms_norm", "default.flagos", "flagos", lambda x: x),
                    OpImpl("rms_norm", "reference.torch", "reference", lambda x: x),
                ]
            )
        return ["fake"]

    monkeypatch.setattr("vllm_fl.dispatch.builtin.register_builtins", register)
    monkeypatch.setattr("vllm_fl.dispatch.discovery.metadata.entry_points", lambda group: [])
    d.reset_default_manager()
    yield seen
    d.reset_default_manager()


def test_backend_selection_listeners_hear_every_default_manager(listener):
    first = d.get_default_manager()
    assert listener == []
    d.call_op("rms_norm", 1)
    assert listener == [(first, ["rms_norm"])]  # once per installed selection
    d.reset_default_manager()
    second = d.get_default_manager()
    d.call_op("rms_norm", 1)
    assert second is not first and listener[-1] == (second, ["rms_norm"])
    assert len(listener) == 2


def test_other_managers_do_not_tell_the_default_backends(listener):
    d.get_default_manager()
    m, Layer, _ = setup()
    Layer().forward_oot(1)
    assert m.impls_in_use() and listener == []

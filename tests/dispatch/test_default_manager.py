"""The default manager's API: dispatch_method on a layer class, and selection listeners."""

import pytest
from dispatch_helpers import norm_layer as setup

import vllm_fl.dispatch as d
from vllm_fl.dispatch import default_manager


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
def listener():
    """A default-manager selection listener recording (manager, ops on FlagGems); removed after."""
    seen = []

    def record(manager):
        seen.append((manager, sorted(i.op_name for i in manager.impls_in_use())))

    default_manager.on_default_selection(record)
    default_manager.on_default_selection(record)  # subscribing twice calls it once
    yield seen
    default_manager._DEFAULT_SELECTION_LISTENERS.remove(record)


def test_default_selection_listeners_hear_every_default_manager(fake_builtins, listener):
    first = d.get_default_manager()
    assert listener == []
    d.call_op("rms_norm", 1)
    assert listener == [(first, ["rms_norm"])] * 2  # the eager selection, then the traced one
    d.reset_default_manager()
    second = d.get_default_manager()
    d.call_op("rms_norm", 1)
    assert second is not first and listener[-1] == (second, ["rms_norm"])
    assert len(listener) == 4


def test_other_managers_do_not_tell_default_listeners(listener):
    m, Layer, _ = setup()
    Layer().forward_oot(1)
    assert m.impls_in_use() and listener == []

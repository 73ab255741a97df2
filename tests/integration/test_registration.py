"""Registration of the OOT classes: idempotent, filtered by the OOT policy, checked first."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("vllm")

import fake_oot  # noqa: E402
from vllm_fl import registration  # noqa: E402
from vllm_fl.dispatch import policy as dispatch_policy  # noqa: E402

OOT_ENV = (
    "VLLM_FL_PREFER_ENABLED",
    "VLLM_FL_OOT_ENABLED",
    "VLLM_FL_OOT_WHITELIST",
    "VLLM_FL_OOT_BLACKLIST",
    "VLLM_FL_CONFIG",
)


@pytest.fixture
def fresh(monkeypatch, clean_oot_registry):
    """Fake OOT classes, no OOT registration yet, the policy re-read from a clean environment."""
    for var in OOT_ENV:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(registration, "_oot_classes", lambda: dict(fake_oot.FAKE_OOT_CLASSES))
    for name in fake_oot.FAKE_OOT_CLASSES:
        clean_oot_registry.pop(name, None)
    registration._replaced.clear()
    registration._logged = False

    def configure(**env):
        for var, value in env.items():
            monkeypatch.setenv(var, value)
        dispatch_policy.reset_global_policy()

    configure()
    yield clean_oot_registry, configure
    monkeypatch.undo()
    dispatch_policy.reset_global_policy()


def test_registers_every_class_once_and_is_idempotent(fresh, caplog):
    registry, _ = fresh
    caplog.set_level(logging.INFO, logger=registration.LOGGER_NAME)
    first = registration.register_oot_classes()
    assert first == fake_oot.FAKE_OOT_CLASSES
    assert registry["RMSNorm"] is fake_oot.RMSNormFake
    assert registry["SiluAndMul"] is fake_oot.SiluAndMulFake
    second = registration.register_oot_classes()  # vLLM calls the entry point again
    assert second == first
    assert registry["RMSNorm"] is fake_oot.RMSNormFake
    replaced_logs = [r for r in caplog.records if "replaced vLLM layers" in r.getMessage()]
    assert len(replaced_logs) == 1
    assert "RMSNorm -> RMSNormFake" in replaced_logs[0].getMessage()


def test_vllm_builds_our_class_once_registered(fresh, vllm_config):
    from vllm.model_executor.layers.layernorm import RMSNorm

    registration.register_oot_classes()
    layer = RMSNorm(64)
    assert type(layer) is fake_oot.RMSNormFake
    assert layer.weight.shape == (64,)


@pytest.mark.parametrize("entry", ["RMSNorm", "rmsnorm", "rms_norm", "RMS_NORM"])
def test_blacklist_matches_class_or_op_name(fresh, entry):
    registry, configure = fresh
    configure(VLLM_FL_OOT_BLACKLIST=entry)
    assert registration.register_oot_classes() == {"SiluAndMul": "fake_oot:SiluAndMulFake"}
    assert "RMSNorm" not in registry


def test_whitelist_registers_only_the_listed(fresh):
    registry, configure = fresh
    configure(VLLM_FL_OOT_WHITELIST="silu_and_mul")
    assert registration.register_oot_classes() == {"SiluAndMul": "fake_oot:SiluAndMulFake"}
    assert "RMSNorm" not in registry


def test_config_file_oot_blacklist(fresh, tmp_path):
    registry, configure = fresh
    path = tmp_path / "fl.yaml"
    path.write_text("oot_blacklist: [SiluAndMul]\n")
    configure(VLLM_FL_CONFIG=str(path))
    assert registration.register_oot_classes() == {"RMSNorm": "fake_oot:RMSNormFake"}


def test_whitelist_and_blacklist_together_is_an_error(fresh):
    _, configure = fresh
    with pytest.raises(Exception, match="(?i)whitelist.*blacklist|blacklist.*whitelist"):
        configure(VLLM_FL_OOT_WHITELIST="RMSNorm", VLLM_FL_OOT_BLACKLIST="SiluAndMul")
        registration.register_oot_classes()


@pytest.mark.parametrize("env", [{"VLLM_FL_OOT_ENABLED": "0"}, {"VLLM_FL_PREFER_ENABLED": "false"}])
def test_switches_turn_registration_off(fresh, env, caplog):
    registry, configure = fresh
    configure(**env)
    caplog.set_level(logging.INFO, logger=registration.LOGGER_NAME)
    assert registration.register_oot_classes() == {}
    assert "RMSNorm" not in registry and "SiluAndMul" not in registry
    assert any("disabled" in r.getMessage() for r in caplog.records)


def test_another_plugins_registration_is_left_in_place(fresh, caplog):
    registry, _ = fresh
    from vllm_fl import compat

    compat.register_oot(fake_oot.NotASubclass, "SiluAndMul")
    caplog.set_level(logging.WARNING, logger=registration.LOGGER_NAME)
    assert registration.register_oot_classes() == {"RMSNorm": "fake_oot:RMSNormFake"}
    assert registry["SiluAndMul"] is fake_oot.NotASubclass
    assert any("another plugin" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "target, message",
    [
        ("fake_oot:WithInit", "must not define __init__"),
        ("fake_oot:NoForwardOot", "must define forward_oot"),
        ("fake_oot:SiluAndMulFake", "must subclass RMSNorm"),
    ],
)
def test_classes_are_checked_before_registration(fresh, monkeypatch, target, message):
    registry, _ = fresh
    name = "SiluAndMul" if "NoForwardOot" in target else "RMSNorm"
    monkeypatch.setattr(registration, "_oot_classes", lambda: {name: target})
    with pytest.raises(TypeError, match=message):
        registration.register_oot_classes()
    assert name not in registry

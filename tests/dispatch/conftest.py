"""Every dispatch test starts from a clean environment (no dispatch variables set, built-in
defaults, no policy override) and leaves the process-wide state as it found it; fixtures for the
default manager and plugins. Plain helpers are in ``dispatch_helpers``."""

from __future__ import annotations

import logging
import sys
import types

import pytest

import vllm_fl.dispatch as d
from vllm_fl.dispatch import OpImpl
from vllm_fl.dispatch import discovery
from vllm_fl.dispatch.config import settings
from vllm_fl.dispatch.policy import current as policy
from vllm_fl.dispatch.logger_manager import LOGGER_NAME

DISPATCH_ENV = tuple(settings.ENV_VARS)


@pytest.fixture(autouse=True)
def clean_dispatch_env(monkeypatch):
    for var in DISPATCH_ENV:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("VLLM_FL_PLATFORM", "cpu")
    del policy._overrides[:]
    policy.reset_global_policy()
    yield monkeypatch
    del policy._overrides[:]
    monkeypatch.undo()
    policy.reset_global_policy()


@pytest.fixture
def caplog_dispatch(caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER_NAME)
    return caplog


@pytest.fixture
def fake_builtins(monkeypatch):
    """A default manager whose built-ins are one flagos, one cuda and one reference impl."""

    def register(reg, errors=None):
        reg.register_many(
            [
                OpImpl("rms_norm", "default.flagos", "flagos", lambda x: x),
                OpImpl("rms_norm", "vendor.cuda", "vendor", lambda x: x, vendor="cuda"),
                OpImpl("rms_norm", "reference.torch", "reference", lambda x: x),
            ]
        )
        return ["fake"]

    monkeypatch.setattr("vllm_fl.dispatch.builtin.register_builtins", register)
    monkeypatch.setattr("vllm_fl.dispatch.discovery.metadata.entry_points", lambda group: [])
    d.reset_default_manager()
    yield
    d.reset_default_manager()


@pytest.fixture
def no_entry_points(monkeypatch):
    monkeypatch.setattr(discovery.metadata, "entry_points", lambda group: [])


@pytest.fixture
def fresh_default():
    d.reset_default_manager()
    yield
    d.reset_default_manager()


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

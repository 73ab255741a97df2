"""Every dispatch test starts from a clean environment (no dispatch variables set, built-in
defaults, no policy override) and leaves the process-wide state as it found it."""

from __future__ import annotations

import logging

import pytest

from vllm_fl.dispatch import OpImpl, OpManager, OpRegistry, policy, settings
from vllm_fl.dispatch.logger_manager import LOGGER_NAME
from vllm_fl.dispatch.types import BackendImplKind

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


def make_impl(op, impl_id, kind, fn, vendor=None, priority=None, available=None):
    return OpImpl(op, impl_id, kind, fn, vendor=vendor, priority=priority, available=available)


@pytest.fixture
def three_backends():
    """A registry with flagos, vendor:cuda and reference impls of a layer op `norm` that record
    which one ran; returns (manager, registry, calls)."""
    calls: list[str] = []

    def mk(tag):
        def norm(self, x, residual=None):
            calls.append(tag)
            return (tag, x, residual)

        return norm

    reg = OpRegistry()
    reg.register_many(
        [
            make_impl("norm", "default.flagos", BackendImplKind.DEFAULT, mk("flagos")),
            make_impl("norm", "vendor.cuda", "vendor", mk("cuda"), vendor="cuda"),
            make_impl("norm", "reference.torch", "reference", mk("reference")),
        ]
    )
    return OpManager(registry=reg), reg, calls

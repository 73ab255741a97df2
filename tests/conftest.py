"""Fixtures shared by every test directory: a current vLLM config for building layers outside
an engine, and a clean vLLM OOT registry for tests that register classes."""

from __future__ import annotations

import pytest


@pytest.fixture
def vllm_config():
    """A default VllmConfig made current, so vLLM layers can be constructed outside an engine."""
    from vllm.config import VllmConfig, set_current_vllm_config

    config = VllmConfig()
    with set_current_vllm_config(config):
        yield config


@pytest.fixture
def clean_oot_registry():
    """Restore vLLM's OOT registry and the plugin's registration state after the test."""
    from vllm_fl import compat, registration

    registry = compat.oot_registry()
    saved = dict(registry)
    saved_replaced = dict(registration._replaced)
    saved_logged = registration._logged
    yield registry
    registry.clear()
    registry.update(saved)
    registration._replaced.clear()
    registration._replaced.update(saved_replaced)
    registration._logged = saved_logged

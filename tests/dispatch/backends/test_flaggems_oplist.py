"""The FlagGems backend's op list (FLAGGEMS_ENABLE_OPLIST_PATH): the ops the default manager runs
on FlagGems, rewritten atomically when they change."""

import os

import pytest

from dispatch_helpers import build_default as build

import vllm_fl.dispatch as d
from vllm_fl.backends import flaggems
from vllm_fl.dispatch import OpImpl


@pytest.fixture
def flaggems_builtins(monkeypatch, no_entry_points, fresh_default):
    """Built-ins registered for the FlagGems backend object: its op list writer listens."""

    def register(reg, errors=None):
        with reg.registering_for(flaggems.BACKEND):
            reg.register_many(
                [
                    OpImpl("silu_and_mul", "default.flagos", "flagos", lambda x: x),
                    OpImpl("rms_norm", "default.flagos", "flagos", lambda x: x),
                    OpImpl("rms_norm", "reference.torch", "reference", lambda x: -x),
                ]
            )
        return ["flaggems"]

    monkeypatch.setattr("vllm_fl.dispatch.builtin.register_builtins", register)


def test_flaggems_oplist_written_for_default_manager(
    clean_dispatch_env, tmp_path, flaggems_builtins
):
    path = tmp_path / "ops.txt"
    clean_dispatch_env.setenv("FLAGGEMS_ENABLE_OPLIST_PATH", str(path))
    d.reset_global_policy()
    d.get_default_manager()
    assert not path.exists()
    d.call_op("rms_norm", 1)
    assert path.read_text() == "rms_norm\n"
    d.call_op("silu_and_mul", 1)
    assert path.read_text() == "rms_norm\nsilu_and_mul\n"
    with d.with_preference("reference"):
        assert d.call_op("rms_norm", 1) == -1
        assert path.read_text() == "silu_and_mul\n"


def test_oplist_written_atomically_not_through_a_foreign_symlink(
    clean_dispatch_env, flaggems_builtins, tmp_path
):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    link = tmp_path / "ops.txt"
    os.symlink(victim, link)
    build(clean_dispatch_env, FLAGGEMS_ENABLE_OPLIST_PATH=str(link))
    d.call_op("rms_norm", 1)
    assert victim.read_text() == "precious\n"
    assert not link.is_symlink() and link.read_text() == "rms_norm\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ops.txt", "victim.txt"]  # no temp left

"""The FlagGems backend's op list (FLAGGEMS_ENABLE_OPLIST_PATH): the ops the default manager runs
on FlagGems, rewritten atomically when they change."""

import os

from dispatch_helpers import build_default as build

import vllm_fl.dispatch as d
import vllm_fl.dispatch.backends.flaggems  # noqa: F401 - subscribes the op list writer
from vllm_fl.dispatch import OpImpl


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


def test_oplist_written_atomically_not_through_a_foreign_symlink(
    clean_dispatch_env, fake_builtins, tmp_path
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

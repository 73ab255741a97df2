"""Configuration input that used to be accepted silently: each is an error naming its source, or a
WARNING where only the registry can tell (op, impl and vendor names)."""

import json
import logging
import os
import time

import pytest

import vllm_fl.dispatch as d
import vllm_fl.dispatch.backends.flaggems  # noqa: F401 - subscribes the FlagGems op list writer
from vllm_fl.dispatch import ConfigError, OpImpl, load_config


def cfg(**env):
    return load_config({"VLLM_FL_PLATFORM": "cpu", **env})


def write(tmp_path, name, data):
    p = tmp_path / name
    if isinstance(data, bytes):
        p.write_bytes(data)
    else:
        p.write_text(data)
    return str(p)


def user_file(tmp_path, data, name="c.yaml"):
    return cfg(VLLM_FL_CONFIG=write(tmp_path, name, data))


# --------------------------------------------------------------------------- the config file


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n"])
def test_empty_config_file_is_an_error(tmp_path, text):
    with pytest.raises(ConfigError, match=r"VLLM_FL_CONFIG='.*c.yaml': the file has no settings"):
        user_file(tmp_path, text)


def test_explicit_empty_mapping_means_built_in_defaults(tmp_path):
    p = user_file(tmp_path, "{}\n").policy
    assert p.prefer == "flagos" and p.sources["prefer"] == "default"


def test_duplicate_keys_are_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"c.yaml:2: duplicate key 'prefer'"):
        user_file(tmp_path, "prefer: vendor\nprefer: reference\n")
    with pytest.raises(ConfigError, match=r"c.yaml:3: duplicate key 'rms_norm'"):
        user_file(tmp_path, "op_backends:\n  rms_norm: [vendor]\n  rms_norm: [flagos]\n")


def test_non_utf8_bytes_name_the_file(tmp_path):
    with pytest.raises(
        ConfigError, match=r"VLLM_FL_CONFIG='.*c.yaml': line 1: not UTF-8 text \(byte 0xff at offset 8\)"
    ):
        user_file(tmp_path, b"prefer: \xff\n")


@pytest.mark.parametrize(
    "text, match",
    [
        (  # billion laughs
            'a: &a ["x","x","x","x","x","x","x","x","x"]\n'
            + "".join(
                f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},"
                f"*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)}]\n"
                for i in range(9)
            ),
            r"c.yaml:1: YAML anchors and aliases are not allowed",
        ),
        ("prefer: &x [*x]\n", r"c.yaml:1: YAML anchors and aliases are not allowed"),
        ("prefer: !!python/object/apply:os.system ['true']\n", r"c.yaml:1: tag .* not allowed"),
        ("op_backends: !!python/object/apply:os.system {}\n", r"c.yaml:1: tag .* not allowed"),
        ("prefer: !custom vendor\n", r"c.yaml:1: tag '!custom' not allowed"),
        ("prefer: " + "[" * 500 + "]" * 500 + "\n", r"c.yaml:1: nested deeper than \d+ levels"),
        ("prefer: " + "[" * 60000 + "]" * 60000 + "\n", r"c.yaml:1: nested deeper than"),
        ("prefer: " + "9" * 5000 + "\n", r"c.yaml:1: scalar longer than \d+ characters"),
        ("prefer: [unclosed\n", r"c.yaml:2: invalid YAML"),
        ("- prefer\n", r"expected a mapping of settings, got list"),
    ],
    ids=["bomb", "self-alias", "python-tag", "python-tag-map", "custom-tag", "deep", "very-deep",
         "huge-int", "syntax", "list"],
)
def test_hostile_yaml_fails_cleanly_and_fast(tmp_path, text, match):
    start = time.monotonic()
    with pytest.raises(ConfigError, match=match):
        user_file(tmp_path, text)
    assert time.monotonic() - start < 2.0


def test_oversized_config_file(tmp_path):
    with pytest.raises(
        ConfigError, match=r"VLLM_FL_CONFIG='.*c.yaml': file larger than \d+ bytes"
    ):
        user_file(tmp_path, "# " + "x" * (2 << 20) + "\n")


# --------------------------------------------------------------------------- lists and paths


@pytest.mark.parametrize(
    "var",
    [
        "VLLM_FL_ALLOW_VENDORS",
        "VLLM_FL_DENY_VENDORS",
        "VLLM_FL_FLAGOS_BLACKLIST",
        "VLLM_FL_FLAGOS_WHITELIST",
        "VLLM_FL_OOT_BLACKLIST",
        "VLLM_FL_OOT_WHITELIST",
        "VLLM_FL_PLUGIN_MODULES",
    ],
)
@pytest.mark.parametrize("value", [",", " , ,"])
def test_list_of_only_separators_is_an_error(var, value):
    with pytest.raises(ConfigError, match=rf"{var}={value!r}: no names, only separators"):
        cfg(**{var: value})


def test_per_op_of_only_separators_is_an_error():
    with pytest.raises(ConfigError, match=r"VLLM_FL_PER_OP=';;': no 'op=tokens' entry"):
        cfg(VLLM_FL_PER_OP=";;")


def test_empty_yaml_whitelist_allows_nothing(tmp_path):
    p = user_file(tmp_path, "allow_vendors: []\n").policy
    assert p.allow_vendors == frozenset()


def test_oplist_path_that_is_a_directory(tmp_path):
    with pytest.raises(
        ConfigError, match=r"FLAGGEMS_ENABLE_OPLIST_PATH='.*': is a directory; expected a file path"
    ):
        cfg(FLAGGEMS_ENABLE_OPLIST_PATH=str(tmp_path))


# --------------------------------------------------------------------------- VLLM_FL_OP_CONFIG


@pytest.mark.parametrize(
    "data, match",
    [
        (b'{"op_backends": {"a": ["flagos"], "a": ["vendor"]}}', r"duplicate key 'a'"),
        (b'{"op_backends": {"a": ["\xff"]}}', r"not UTF-8 text \(byte 0xff at offset 24\)"),
        (b"[" * 100000 + b"]" * 100000, r"nested too deeply"),
        (b"", r"invalid JSON"),
    ],
    ids=["duplicate", "non-utf8", "deep", "empty"],
)
def test_op_config_json_hostile(tmp_path, data, match):
    path = write(tmp_path, "ops.json", data)
    with pytest.raises(ConfigError, match=rf"VLLM_FL_OP_CONFIG={path!r}: .*{match}"):
        cfg(VLLM_FL_OP_CONFIG=path)


# --------------------------------------------------------------------------- names the registry knows


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

    monkeypatch.setattr("vllm_fl.dispatch.builtin_backends.register_builtins", register)
    monkeypatch.setattr("vllm_fl.dispatch.discovery.metadata.entry_points", lambda group: [])
    d.reset_default_manager()
    yield
    d.reset_default_manager()


def build(env, **vars):
    for k, v in vars.items():
        env.setenv(k, v)
    d.reset_global_policy()
    d.reset_default_manager()
    d.get_default_manager()


def warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_unknown_op_in_per_op_warns(clean_dispatch_env, fake_builtins, caplog_dispatch):
    build(clean_dispatch_env, VLLM_FL_PER_OP="rms_nrom=reference")
    assert any(
        "env VLLM_FL_PER_OP" in w and "'rms_nrom'" in w and "no registered op" in w
        and "rms_norm" in w
        for w in warnings(caplog_dispatch)
    ), warnings(caplog_dispatch)


def test_unknown_op_in_config_file_and_op_config_warns(
    clean_dispatch_env, fake_builtins, caplog_dispatch, tmp_path
):
    path = write(tmp_path, "c.yaml", "op_backends:\n  silu: [reference]\n")
    build(clean_dispatch_env, VLLM_FL_CONFIG=path)
    assert any(path in w and "'silu'" in w for w in warnings(caplog_dispatch))
    caplog_dispatch.clear()
    clean_dispatch_env.delenv("VLLM_FL_CONFIG")
    ops = write(tmp_path, "ops.json", json.dumps({"op_backends": {"gelu": ["flagos"]}}))
    build(clean_dispatch_env, VLLM_FL_OP_CONFIG=ops)
    assert any("VLLM_FL_OP_CONFIG" in w and "'gelu'" in w for w in warnings(caplog_dispatch))


def test_impl_token_naming_no_impl_warns(clean_dispatch_env, fake_builtins, caplog_dispatch):
    build(clean_dispatch_env, VLLM_FL_PER_OP="rms_norm=impl:vendor.cdua|reference")
    assert any(
        "'impl:vendor.cdua'" in w and "no registered impl of op 'rms_norm'" in w
        and "vendor.cuda" in w
        for w in warnings(caplog_dispatch)
    ), warnings(caplog_dispatch)


@pytest.mark.parametrize("var", ["VLLM_FL_ALLOW_VENDORS", "VLLM_FL_DENY_VENDORS"])
def test_vendor_no_backend_declares_warns(clean_dispatch_env, fake_builtins, caplog_dispatch, var):
    build(clean_dispatch_env, **{var: "cdua"})
    assert any(
        f"env {var}" in w and "'cdua'" in w and "no backend declares" in w and "cuda" in w
        for w in warnings(caplog_dispatch)
    ), warnings(caplog_dispatch)


def test_vendor_token_naming_unknown_vendor_warns(
    clean_dispatch_env, fake_builtins, caplog_dispatch
):
    build(clean_dispatch_env, VLLM_FL_PER_OP="rms_norm=vendor:cdua|reference")
    assert any("'vendor:cdua'" in w for w in warnings(caplog_dispatch)), warnings(caplog_dispatch)


def test_explain_lists_unknown_names(clean_dispatch_env, fake_builtins):
    from vllm_fl.dispatch.explain import explain

    build(clean_dispatch_env, VLLM_FL_DENY_VENDORS="cdua")
    text = explain()
    assert "Names no backend registered (typos?):" in text
    assert "deny_vendors lists 'cdua'" in text and "did you mean 'cuda'?" in text


def test_known_names_do_not_warn(clean_dispatch_env, fake_builtins, caplog_dispatch):
    build(
        clean_dispatch_env,
        VLLM_FL_PER_OP="rms_norm=impl:vendor.cuda|vendor:cuda|reference",
        VLLM_FL_DENY_VENDORS="cuda",
    )
    assert warnings(caplog_dispatch) == []


# --------------------------------------------------------------------------- the oplist file


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

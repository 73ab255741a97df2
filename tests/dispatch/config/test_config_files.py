"""Hostile configuration files (YAML and the VLLM_FL_OP_CONFIG JSON) fail fast with an error
naming the file and line."""

import time

import pytest
from dispatch_helpers import cfg, user_file, write

from vllm_fl.dispatch import ConfigError


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n"])
def test_empty_config_file_is_an_error(tmp_path, text):
    with pytest.raises(ConfigError, match=r"VLLM_FL_CONFIG='.*c.yaml': the file has no settings"):
        user_file(tmp_path, text)


def test_duplicate_keys_are_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"c.yaml:2: duplicate key 'prefer'"):
        user_file(tmp_path, "prefer: vendor\nprefer: reference\n")
    with pytest.raises(ConfigError, match=r"c.yaml:3: duplicate key 'rms_norm'"):
        user_file(tmp_path, "op_backends:\n  rms_norm: [vendor]\n  rms_norm: [flagos]\n")


def test_non_utf8_bytes_name_the_file(tmp_path):
    with pytest.raises(
        ConfigError,
        match=r"VLLM_FL_CONFIG='.*c.yaml': line 1: not UTF-8 text \(byte 0xff at offset 8\)",
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
    ids=[
        "bomb",
        "self-alias",
        "python-tag",
        "python-tag-map",
        "custom-tag",
        "deep",
        "very-deep",
        "huge-int",
        "syntax",
        "list",
    ],
)
def test_hostile_yaml_fails_cleanly_and_fast(tmp_path, text, match):
    start = time.monotonic()
    with pytest.raises(ConfigError, match=match):
        user_file(tmp_path, text)
    assert time.monotonic() - start < 2.0


def test_oversized_config_file(tmp_path):
    with pytest.raises(ConfigError, match=r"VLLM_FL_CONFIG='.*c.yaml': file larger than \d+ bytes"):
        user_file(tmp_path, "# " + "x" * (2 << 20) + "\n")


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

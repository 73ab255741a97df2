"""Hostile configuration files (YAML and the VLLM_FL_OP_CONFIG JSON) fail with an error naming
the file and line, and never hang."""

import os
import subprocess
import sys

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
            r"c.yaml:1: anchor &a is not supported",
        ),
        ("prefer: &x [*x]\n", r"c.yaml:1: anchor &x is not supported"),
        ("prefer: *x\n", r"c.yaml:1: alias \*x is not supported"),
        ("prefer: !!python/object/apply:os.system ['true']\n", r"c.yaml:1: unknown tag !!python"),
        ("op_backends: !!python/object/apply:os.system {}\n", r"c.yaml:1: unknown tag !!python"),
        ("prefer: !custom vendor\n", r"c.yaml:1: unknown tag !custom"),
        ("prefer: " + "[" * 500 + "]" * 500 + "\n", r"c.yaml:1: nesting deeper than 16 levels"),
        ("prefer: " + "[" * 60000 + "]" * 60000 + "\n", r"c.yaml:1: nesting deeper than"),
        ("prefer: " + "9" * 5000 + "\n", r"c.yaml:1: a scalar of 5000 characters"),
        ("<<: {prefer: vendor}\n", r"c.yaml:1: merge keys \(<<\) are not supported"),
        ("prefer: [unclosed\n", r"c.yaml:2: invalid YAML"),
        ("- prefer\n", r"expected a mapping of settings, got list"),
    ],
    ids=[
        "bomb",
        "self-alias",
        "undefined-alias",
        "python-tag",
        "python-tag-map",
        "custom-tag",
        "deep",
        "very-deep",
        "huge-int",
        "merge-key",
        "syntax",
        "list",
    ],
)
def test_hostile_yaml_fails_cleanly(tmp_path, text, match):
    with pytest.raises(ConfigError, match=match):
        user_file(tmp_path, text)


#: far beyond what refusing any of the files above takes, even on a loaded machine; what it
#: tells apart is a reader that hangs (an alias bomb expanded, say) from one that is slow
HANG = 120


@pytest.mark.parametrize(
    "text",
    [
        'a: &a ["x","x","x","x","x","x","x","x","x"]\n'
        + "".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [" + f"*{chr(97 + i)}," * 8 + "]\n" for i in range(9)
        ),
        "prefer: " + "[" * 60000 + "]" * 60000 + "\n",
    ],
    ids=["bomb", "very-deep"],
)
def test_hostile_yaml_never_hangs(tmp_path, text):
    """Refused in a child process that must finish within ``HANG`` seconds: a timeout is a hang,
    not a slow machine."""
    path = write(tmp_path, "c.yaml", text)
    code = (
        "from vllm_fl.dispatch import ConfigError, load_config\n"
        "try:\n"
        f"    load_config({{'VLLM_FL_PLATFORM': 'cpu', 'VLLM_FL_CONFIG': {path!r}}})\n"
        "except ConfigError as exc:\n"
        "    print('refused:', exc)\n"
    )
    try:
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=HANG,
            env={**os.environ, "VLLM_FL_PLATFORM": "cpu"},
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"reading the hostile file did not finish within {HANG} s: a hang")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("refused:") and "c.yaml:1:" in out.stdout, out.stdout


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

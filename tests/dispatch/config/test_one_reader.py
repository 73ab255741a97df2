"""The settings table is the one reader of its variables: outside ``vllm_fl.dispatch.config``
the code reads one only through ``read_env`` (its parser, its default) or ``env_text`` (its text,
for a message); it may still set one, for a child process."""

import ast
from pathlib import Path

import vllm_fl
from vllm_fl.dispatch.config import settings

ROOT = Path(vllm_fl.__file__).parent
READERS = ("read_env", "env_text")


def _reads(source: str) -> list[str]:
    """``line: how(variable)`` for each variable of the table that ``source`` reads by hand."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            how = getattr(node.func, "attr", None) or getattr(node.func, "id", "call")
            if how in READERS:
                continue
            args = node.args[:1]
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            how, args = "[]", [node.slice]
        else:
            continue
        for arg in args:
            if isinstance(arg, ast.Constant) and arg.value in settings.ENV_VARS:
                out.append(f"{node.lineno}: {how}({arg.value!r})")
    return out


def test_nothing_outside_the_configuration_reads_a_setting_by_hand():
    config = ROOT / "dispatch" / "config"
    found = [
        f"{path.relative_to(ROOT.parent)}:{read}"
        for path in sorted(ROOT.rglob("*.py"))
        if not path.is_relative_to(config)
        for read in _reads(path.read_text())
    ]
    assert found == [], "read these with read_env or env_text:\n" + "\n".join(found)


def test_the_scan_sees_a_read_by_hand_and_lets_a_write_and_read_env_pass():
    source = (
        "import os\n"
        "os.environ.get('VLLM_FL_PREFER')\n"
        "os.environ['VLLM_FL_STRICT']\n"
        "env['VLLM_FL_VERIFY'] = 'on'\n"
        "read_env('VLLM_FL_PLATFORM')\n"
    )
    assert _reads(source) == ["2: get('VLLM_FL_PREFER')", "3: []('VLLM_FL_STRICT')"]

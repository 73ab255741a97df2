"""A ``FLAGCX_PATH`` whose library cannot load is one clear error where vLLM builds its config,
in the front-end process, naming the path and what is missing; one rank never loads it."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
from vllm_fl.distributed.preflight import check_flagcx
from vllm_fl.dispatch import ConfigError
try:
    check_flagcx(int(sys.argv[1]))
except ConfigError as exc:
    print("ConfigError:", exc)
else:
    print("accepted")
"""


def _check(path, world_size: int) -> str:
    env = {"FLAGCX_PATH": str(path), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(world_size)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_a_directory_without_the_library_is_refused_naming_it(tmp_path):
    line = _check(tmp_path, 2)
    assert line.startswith("ConfigError: FLAGCX_PATH: "), line
    assert str(tmp_path) in line and "libflagcx.so" in line


def test_a_library_that_will_not_load_is_refused_with_the_loader_s_reason(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libflagcx.so").write_bytes(b"not an ELF file")
    line = _check(tmp_path, 2)
    assert line.startswith("ConfigError: FLAGCX_PATH: "), line
    assert str(tmp_path) in line


def test_one_rank_needs_no_collectives(tmp_path):
    assert _check(tmp_path, 1) == "accepted"

"""The FlagCX binding (``vllm_fl.backends.flagcx.library``): every way loading can fail raises
FlagcxUnavailable naming the path; dtypes map as flagcx.h numbers them; the module imports
neither torch nor vLLM.

With ``FLAGCX_PATH`` naming a FlagCX build (``scripts/build_flagcx.sh``), the library loads and
makes unique ids; on a machine with two GPUs, each collective matches torch.distributed NCCL.
FlagCX has no CPU-only build (each build has a vendor device adaptor), so collectives run on
GPUs only.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from vllm_fl.backends.flagcx.library import (
    DataType,
    FlagcxLibrary,
    FlagcxUnavailable,
    flagcx_dtype,
)

FLAGCX_PATH = os.environ.get("FLAGCX_PATH")
needs_flagcx = pytest.mark.skipif(
    not FLAGCX_PATH,
    reason="FLAGCX_PATH is unset: build FlagCX with scripts/build_flagcx.sh and name its PREFIX",
)


def test_load_none_says_no_path_was_given():
    with pytest.raises(FlagcxUnavailable, match=r"path is None.*FLAGCX_PATH"):
        FlagcxLibrary.load(None)


def test_load_missing_directory_names_it():
    with pytest.raises(FlagcxUnavailable, match=r"'/nonexistent' does not exist"):
        FlagcxLibrary.load("/nonexistent")


def test_load_file_instead_of_directory_names_it(tmp_path: Path):
    file = tmp_path / "libflagcx.so"
    file.write_bytes(b"")
    with pytest.raises(FlagcxUnavailable, match=re.escape(f"'{file}' is not a directory")):
        FlagcxLibrary.load(file)


def test_load_directory_without_library_lists_where_it_looked(tmp_path: Path):
    with pytest.raises(FlagcxUnavailable) as error:
        FlagcxLibrary.load(tmp_path)
    message = str(error.value)
    assert f"no libflagcx.so in FlagCX directory '{tmp_path}'" in message
    assert str(tmp_path / "lib" / "libflagcx.so") in message
    assert str(tmp_path / "libflagcx.so") in message


def test_load_broken_library_gives_dlopen_error(tmp_path: Path):
    library = tmp_path / "lib" / "libflagcx.so"
    library.parent.mkdir()
    library.write_bytes(b"not an ELF file\n" * 64)
    with pytest.raises(FlagcxUnavailable, match=re.escape(f"cannot load {library}: ")) as error:
        FlagcxLibrary.load(tmp_path)
    assert isinstance(error.value.__cause__, OSError)


def test_load_library_without_flagcx_functions_names_the_first_missing(tmp_path: Path):
    import _ctypes  # a shared library that loads anywhere this test runs, and is no FlagCX

    shutil.copy(_ctypes.__file__, tmp_path / "libflagcx.so")
    with pytest.raises(FlagcxUnavailable, match=r"does not export flagcxGetVersion"):
        FlagcxLibrary.load(tmp_path)


def test_module_imports_neither_torch_nor_vllm():
    code = (
        "import sys, vllm_fl.backends.flagcx.library\n"
        "print(sorted(m for m in ('torch', 'vllm') if m in sys.modules))"
    )
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "dtype, expected",
    [
        (torch.int8, 0),
        (torch.uint8, 1),
        (torch.int32, 2),
        (torch.int64, 4),
        (torch.float16, 6),
        (torch.float32, 7),
        (torch.float64, 8),
        (torch.bfloat16, 9),
    ],
)
def test_dtypes_map_to_flagcx_numbers(dtype: torch.dtype, expected: int):
    assert flagcx_dtype(dtype) == DataType(expected) == expected


def test_unsupported_dtype_names_those_supported():
    with pytest.raises(ValueError, match=r"torch.bool.*supported: int8, uint8"):
        flagcx_dtype(torch.bool)


@needs_flagcx
def test_library_from_flagcx_path_loads_and_makes_unique_ids():
    lib = FlagcxLibrary.load(FLAGCX_PATH)
    assert FlagcxLibrary.load(FLAGCX_PATH) is lib
    assert lib.version() >= 10000
    first, second = lib.unique_id(), lib.unique_id()
    assert len(first) == len(second) == 256
    assert first != second


@needs_flagcx
@pytest.mark.gpu()
def test_collectives_on_two_gpus_match_nccl():
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs 2 GPUs, torch sees {torch.cuda.device_count()}")
    from tests.support import flagcx_collectives

    rows = flagcx_collectives.run(FLAGCX_PATH, world_size=2)
    assert rows and all(row.passed for row in rows), flagcx_collectives.report(rows)

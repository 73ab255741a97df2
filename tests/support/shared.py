"""Work done once per test session and shared by pytest-xdist's workers.

``make test`` runs the suite in parallel workers (``pytest -n``); each is a process of its own with
its own session fixtures, so a model or a vLLM run several test files use would be made once per
worker. What is made here is made once per session, in a folder every worker of the session sees
(the controller names it in ``SHARED_ENV`` before the workers start): the first worker to ask makes
it under a file lock, the others wait for it and read it.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import tempfile
from pathlib import Path
from typing import Callable, TypeVar

from filelock import FileLock

T = TypeVar("T")

#: the environment variable naming the session's shared folder
SHARED_ENV = "VLLM_FL_TEST_SHARED"


def start_session() -> None:
    """Name a fresh shared folder for this session (in the controller, or a run without workers);
    a worker keeps the one its controller named."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        os.environ[SHARED_ENV] = tempfile.mkdtemp(prefix="vllm-fl-tests-")


def end_session() -> None:
    """Remove the shared folder (the controller, or a run without workers)."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        folder = os.environ.pop(SHARED_ENV, None)
        if folder:
            shutil.rmtree(folder, ignore_errors=True)


def shared_dir() -> Path:
    """This session's shared folder."""
    folder = os.environ.get(SHARED_ENV)
    if not folder:
        raise RuntimeError(f"{SHARED_ENV} is not set: tests/conftest.py sets it for the session")
    return Path(folder)


def _slug(key: str) -> str:
    readable = "".join(c if c.isalnum() else "-" for c in key)[:48]
    return f"{readable}-{hashlib.sha1(key.encode()).hexdigest()[:10]}"


def once(key: str, make: Callable[[], T]) -> T:
    """``make()``'s value for ``key``, computed by one worker of the session and read by the
    others (it must pickle). An exception is not shared: the next worker to ask tries again."""
    path = shared_dir() / f"{_slug(key)}.pickle"
    with FileLock(str(path) + ".lock"):
        if path.exists():
            return pickle.loads(path.read_bytes())
        value = make()
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps(value))
        tmp.replace(path)
        return value


def folder_once(key: str, make: Callable[[Path], object]) -> Path:
    """A folder filled once per session by ``make(folder)`` (a model the tests build)."""
    folder = shared_dir() / _slug(key)
    done = folder.with_suffix(".done")
    with FileLock(str(folder) + ".lock"):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            make(folder)
            done.touch()
    return folder

"""The parent side of the fork server (`vllm_fl.testing.zygote`): `run_child` runs a child in a
process forked from a server that has already imported what the child would import first, or,
where no server can stand in for a fresh interpreter, in a fresh interpreter (`child.run_child`).

A server is keyed by the complete environment of the runs it serves (bar `PER_TEST_ENV`) and by
its preload: it was started with that environment, so whatever its imports read (vLLM's platform
resolution and plugin loading included) they read as the run would. Only ``python -m MODULE``
command lines of this interpreter whose module has a `PRELOADS` entry are forked; a run whose
working directory holds a module of the server's name would import another one fresh, and runs
fresh. A process keeps at most `MAX_SERVERS` (the least recently used one is stopped) and stops
them when it exits. ``VLLM_FL_TEST_FORK_SERVER=0`` runs every child in a fresh interpreter.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import OrderedDict
from pathlib import Path

from vllm_fl.testing.child import ChildError, ChildRun, ResidentChild, RESULT_FLAG
from vllm_fl.testing.child import run_child as run_fresh
from vllm_fl.testing.zygote import module_of

#: ``0`` runs every child in a fresh interpreter; ``1`` (the default) lets a fork server run it
SWITCH_ENV = "VLLM_FL_TEST_FORK_SERVER"
#: module a child runs -> the modules its server imports first: what that module imports in a
#: fresh interpreter before it reads its arguments, in the same order
PRELOADS: dict[str, tuple[str, ...]] = {
    "vllm_fl.testing.engine": ("vllm", "vllm.entrypoints.llm"),
}
#: variables that change from test to test and that no preloaded module reads (pytest's)
PER_TEST_ENV = ("PYTEST_CURRENT_TEST",)
#: fork servers one process keeps (each holds its imports' memory, ~0.6 GB for vLLM's)
MAX_SERVERS = 3
#: seconds a server may take to import its preload
START_TIMEOUT_S = 600.0


def enabled() -> bool:
    """Whether children may be forked from a server (`SWITCH_ENV`)."""
    value = os.environ.get(SWITCH_ENV, "1")
    if value not in ("0", "1"):
        raise ValueError(f"{SWITCH_ENV}={value!r}; allowed: 0 (fresh interpreters), 1")
    return value == "1"


def forkable(argv: list[str]) -> bool:
    """Whether a fork server may run ``argv``: ``python -m MODULE`` of this interpreter, MODULE
    in `PRELOADS`."""
    return module_of(argv) in PRELOADS


class ForkedProcess:
    """A child forked by a server: its pid, and its exit status when the server reports it."""

    def __init__(self, conn: socket.socket):
        self.conn = conn
        self._buffer = b""
        self.returncode: int | None = None
        answer = self._answer(None)
        if "pid" not in answer:
            conn.close()
            raise ChildError(f"the fork server refused the run: {answer}")
        self.pid: int = answer["pid"]

    def _answer(self, timeout: float | None) -> dict:
        """The server's next answer (one JSON line); TimeoutError after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            self.conn.settimeout(left)
            chunk = self.conn.recv(4096)
            if not chunk:
                raise ChildError("the fork server stopped before the child ended")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)

    def wait(self, timeout: float | None = None) -> int:
        """The exit status; subprocess.TimeoutExpired after ``timeout`` seconds."""
        if self.returncode is None:
            try:
                answer = self._answer(timeout)
            except TimeoutError:
                raise subprocess.TimeoutExpired(str(self.pid), timeout) from None
            self.returncode = answer["returncode"]
            self.conn.close()
        return self.returncode

    def kill(self) -> None:
        """SIGKILL, sent by the server (which holds the child's pidfd: no pid reused)."""
        if self.returncode is None:
            self.conn.settimeout(None)
            self.conn.sendall(b"kill\n")


class Server:
    """One running fork server (a `ResidentChild` that answered ready)."""

    def __init__(self, env: dict[str, str], preload: tuple[str, ...]):
        self.folder = Path(tempfile.mkdtemp(prefix="vllm-fl-zygote-"))
        self.socket = self.folder / "socket"
        self.preload_output = self.folder / "preload.log"
        argv = [
            *(sys.executable, "-m", "vllm_fl.testing.zygote"),
            *("--socket", str(self.socket), "--preload", ",".join(preload)),
            *("--preload-output", str(self.preload_output)),
        ]
        # started in an empty folder: nothing there shadows what it imports
        home = self.folder / "cwd"
        home.mkdir()
        self.child = ResidentChild("fork server", argv, env, self.preload_output, cwd=home)
        try:
            self.ready = self.child.answer(START_TIMEOUT_S)
        except ChildError as error:
            self.ready = {"ready": False, "why": str(error)}
        self.modules = frozenset(self.ready.get("modules", ()))

    @property
    def ok(self) -> bool:
        return bool(self.ready.get("ready")) and self.child.proc.poll() is None

    def shadows(self, cwd: Path) -> bool:
        """Whether ``cwd`` (first on the child's path) holds a module or package named as one
        the server imported: a fresh interpreter would import that one instead."""
        try:
            names = os.listdir(cwd)
        except OSError:
            return True
        for name in names:
            stem = name.partition(".")[0]
            if stem in self.modules and (name == stem or name.endswith((".py", ".so", ".pyc"))):
                return True
        return False

    def fork(self, argv: list[str], env: dict[str, str], cwd: Path, output: int) -> ForkedProcess:
        """Start ``argv`` forked, its stdin /dev/null, stdout and stderr on fd ``output``."""
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)  # a request is one packet
        conn.connect(str(self.socket))
        request = json.dumps({"argv": argv, "env": env, "cwd": str(cwd)}).encode()
        stdin = os.open(os.devnull, os.O_RDONLY)
        try:
            socket.send_fds(conn, [request], [stdin, output])
        finally:
            os.close(stdin)
        return ForkedProcess(conn)

    def close(self) -> None:
        self.child.close(timeout=30)
        shutil.rmtree(self.folder, ignore_errors=True)


_servers: OrderedDict[tuple, Server] = OrderedDict()


def _server(env: dict[str, str], preload: tuple[str, ...]) -> Server:
    key = (preload, tuple(sorted((k, v) for k, v in env.items() if k not in PER_TEST_ENV)))
    server = _servers.get(key)
    if server is not None and not server.ok and server.ready.get("ready"):
        server.close()  # it died after it was ready: start another
        server = None
    if server is None:
        while len(_servers) >= MAX_SERVERS:
            _servers.popitem(last=False)[1].close()
        server = _servers[key] = Server(env, preload)
    _servers.move_to_end(key)
    return server


@atexit.register
def close_all() -> None:
    """Stop every fork server of this process."""
    while _servers:
        _servers.popitem()[1].close()


def run_child(
    argv: list[str],
    env: dict[str, str],
    *,
    timeout: float,
    cwd: str | Path | None = None,
) -> ChildRun:
    """`child.run_child`'s run (``argv --result FILE`` with exactly ``env``), forked from a fork
    server where one can stand in for a fresh interpreter, else in a fresh interpreter. Raises
    subprocess.TimeoutExpired when it outlives ``timeout`` seconds."""
    if not enabled() or not forkable(argv):
        return run_fresh(argv, env, timeout=timeout, cwd=cwd)
    workdir = Path(cwd if cwd is not None else os.getcwd()).resolve()
    start = time.perf_counter()  # a server started for this run counts in its time
    server = _server(env, PRELOADS[module_of(argv)])
    if not server.ok or server.shadows(workdir):
        return run_fresh(argv, env, timeout=timeout, cwd=cwd)
    with tempfile.TemporaryDirectory(prefix="vllm-fl-child-") as tmp:
        path, log = Path(tmp) / "result.json", Path(tmp) / "output"
        with open(log, "wb") as output:
            proc = server.fork([*argv, RESULT_FLAG, str(path)], env, workdir, output.fileno())
        try:
            returncode = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise subprocess.TimeoutExpired(argv, timeout, log.read_text(errors="replace"))
        wall = time.perf_counter() - start
        result = None
        if returncode == 0 and path.exists():
            result = json.loads(path.read_text())
        text = log.read_text(errors="replace")
    return ChildRun(result, text, wall, returncode, forked=True)

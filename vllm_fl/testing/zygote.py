"""A fork server ("zygote"): imports modules once, then forks a child per run that goes on as
``python -m MODULE ARGS`` would in a fresh interpreter with the run's environment.

Started as ``python -m vllm_fl.testing.zygote --socket PATH --preload A,B --result FILE`` with
exactly the environment of the runs it will serve (`vllm_fl.testing.zygotes` keys servers by it),
so every variable a preloaded module reads while it is imported had the value a fresh run would
give it. It answers once in ``FILE`` (`vllm_fl.testing.child`): ready, with what the parent needs
to decide whether a run may use it, or why it cannot serve. Then, on the Unix socket (packets), each
connection is one run: a JSON request ``{"argv", "env", "cwd"}`` with the run's stdin and output
as passed file descriptors; the answer is ``{"pid": N}`` at once and ``{"returncode": N}`` when
the child exits (``kill`` sent on the connection kills it). ``quit`` on stdin, or stdin closed
(the parent died), stops the server; children still running go on.

The forked child restores what a fresh interpreter would have: fds 0-2 from the request (and
nothing else of the server's), the environment, the working directory and ``sys.path[0]``, a new
``__main__`` module, multiprocessing's idea of the start directory and its own authentication
key; it first writes what the preload printed, so that its output reads as a fresh run's. It then
runs the module as ``python -m`` does and exits as the interpreter would (threads joined, atexit
handlers run, output flushed), without tearing its modules down (see `_exit`). The server never starts a thread (a fork copies only the calling one):
it refuses to serve when its preload left a thread at work (`busy_threads`).
"""

from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import json
import multiprocessing.process
import os
import runpy
import selectors
import signal
import socket
import sys
import threading
import time
import types
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from vllm_fl.testing.child import add_result_argument, write_result

#: the most bytes of one request (its environment included)
MAX_REQUEST = 1 << 20
#: looks for busy threads after the preload, and the seconds between two
BUSY_RETRIES, BUSY_WAIT_S = 20, 0.1
#: fds a request passes: the child's stdin, and its stdout (stderr goes there too)
REQUEST_FDS = 2


@dataclass(frozen=True)
class Request:
    """One run: the command line (``[python, "-m", module, ...]``), its environment and working
    directory."""

    argv: list[str]
    env: dict[str, str]
    cwd: str

    @property
    def module(self) -> str:
        return self.argv[2]


def module_of(argv: list[str]) -> str | None:
    """The module of ``[sys.executable, "-m", module, ...]``, None for any other command line
    (a fork of this interpreter can only stand in for ``python -m``)."""
    if len(argv) >= 3 and argv[0] == sys.executable and argv[1] == "-m":
        return argv[2]
    return None


def busy_threads() -> list[str]:
    """The threads of this process a fork must not copy the state of: every Python thread but
    this one, and every native thread that is not idle in a futex wait. An idle pool thread (the
    OpenBLAS servers numpy and OpenCV start while they are imported) waits on a condition with
    its lock released, and OpenBLAS stops its threads before a fork and starts them again in the
    child as a fresh interpreter would; a thread doing work may hold a lock the child would
    never see released. Empty where a fork is safe."""
    busy = [
        f"Python thread {t.name}" for t in threading.enumerate() if t is not threading.main_thread()
    ]
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:  # no /proc: nothing to tell the native threads by
        return busy or []
    for tid in tasks:
        if int(tid) == os.getpid():
            continue
        try:
            wchan = Path(f"/proc/self/task/{tid}/wchan").read_text().strip()
        except OSError:  # it ended meanwhile
            continue
        if not wchan.startswith("futex"):
            busy.append(f"native thread {tid} in {wchan or 'user space'}")
    return busy


def _preload(modules: list[str]) -> None:
    for name in modules:
        importlib.import_module(name)


class Server:
    """The server's loop: a selector over stdin, the listening socket, each run's connection and
    each child's pidfd. Returns a `Request` in a forked child (which then runs it), None in the
    server when it stops."""

    def __init__(self, listener: socket.socket, preload_output: str):
        self.listener, self.preload_output = listener, preload_output
        self.selector = selectors.DefaultSelector()
        self.selector.register(sys.stdin.fileno(), selectors.EVENT_READ, ("stdin", None))
        self.selector.register(listener, selectors.EVENT_READ, ("accept", None))
        #: this process's own sockets and pidfds, closed in every child
        self.sockets: set[socket.socket] = {listener}
        self.pidfds: set[int] = set()

    def serve(self) -> Request | None:
        while True:
            for key, _ in self.selector.select():
                kind, data = key.data
                if kind == "stdin":
                    line = os.read(key.fd, 4096)
                    if not line or line.strip() == b"quit":
                        return None
                elif kind == "accept":
                    conn, _ = self.listener.accept()
                    request = self._start(conn)
                    if request is not None:
                        return request  # in the child
                elif kind == "conn":
                    self._on_message(key.fileobj, data)
                elif kind == "pidfd":
                    self._on_exit(key.fd, data)

    def _start(self, conn: socket.socket) -> Request | None:
        message, fds, _flags, _addr = socket.recv_fds(conn, MAX_REQUEST, REQUEST_FDS)
        try:
            data = json.loads(message)
            request = Request(argv=data["argv"], env=data["env"], cwd=data["cwd"])
            if module_of(request.argv) is None or len(fds) != REQUEST_FDS:
                raise ValueError(f"not a python -m command line with {REQUEST_FDS} fds")
        except (ValueError, KeyError) as error:
            conn.sendall(json.dumps({"error": str(error)}).encode() + b"\n")
            conn.close()
            for fd in fds:
                os.close(fd)
            return None
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            self._become_child(fds)
            return request
        for fd in fds:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        self.selector.register(pidfd, selectors.EVENT_READ, ("pidfd", (pid, conn)))
        self.selector.register(conn, selectors.EVENT_READ, ("conn", pidfd))
        self.sockets.add(conn)
        self.pidfds.add(pidfd)
        conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        return None

    def _on_message(self, conn: socket.socket, pidfd: int) -> None:
        try:
            message = conn.recv(4096)
        except OSError:
            message = b""
        if message.strip() == b"kill":
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        elif not message:  # the parent went away: the child goes on, nobody hears its end
            self.selector.unregister(conn)

    def _on_exit(self, pidfd: int, data: tuple[int, socket.socket]) -> None:
        pid, conn = data
        _, status = os.waitpid(pid, 0)
        self.selector.unregister(pidfd)
        self.pidfds.discard(pidfd)
        os.close(pidfd)
        answer = json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode()
        try:
            conn.sendall(answer + b"\n")
        except OSError:
            pass  # the parent went away
        if conn.fileno() in self.selector.get_map():
            self.selector.unregister(conn)
        self.sockets.discard(conn)
        conn.close()

    def _become_child(self, fds: list[int]) -> None:
        """In the forked child: fds 0-2 from the request, none of the server's left open."""
        self.selector.close()
        stdin, output = fds
        os.dup2(stdin, 0)
        os.dup2(output, 1)
        os.dup2(output, 2)
        # detached first: a socket object collected later would close its fd number, by then
        # perhaps another file's
        own = [sock.detach() for sock in self.sockets]
        for fd in {*own, *self.pidfds, stdin, output}:
            if fd > 2:
                os.close(fd)


def run_as_main(request: Request, preload_output: str) -> NoReturn:
    """In the forked child: become ``python -m MODULE ARGS`` started in ``request.cwd`` with
    ``request.env``, run the module as ``__main__`` and exit as the interpreter would (`_exit`)."""
    # into stdout's buffer, where a fresh interpreter's own preload would have left it
    sys.stdout.write(preload_output)
    os.chdir(request.cwd)
    os.environ.clear()
    os.environ.update(request.env)
    # `python -m` puts the working directory first; the rest of the path came from the same
    # PYTHONPATH and installation
    sys.path[0] = os.getcwd()
    importlib.invalidate_caches()  # files made since the server started are found
    multiprocessing.process.ORIGINAL_DIR = os.getcwd()
    multiprocessing.current_process().authkey = os.urandom(32)
    sys.argv = ["-m", *request.argv[3:]]
    sys.orig_argv = list(request.argv)
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        runpy._run_module_as_main(request.module)  # what `python -m` itself calls
        code = 0
    except SystemExit as exit_:
        code = _exit_code(exit_)
    except KeyboardInterrupt:
        sys.excepthook(*sys.exc_info())
        _exit(1)
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # an interpreter then dies of the signal
        os.kill(os.getpid(), signal.SIGINT)
        code = 1
    except BaseException:  # noqa: BLE001  (printed and exit status 1, as the interpreter does)
        sys.excepthook(*sys.exc_info())
        code = 1
    os._exit(_exit(code))


def _exit_code(exit_: SystemExit) -> int:
    """The exit status the interpreter gives ``exit_`` (printing a code that is no number)."""
    if exit_.code is None:
        return 0
    if isinstance(exit_.code, int):
        return exit_.code
    print(exit_.code, file=sys.stderr)
    return 1


def _exit(code: int) -> int:
    """What the interpreter does at exit that a run can see: stop and join the threads that are
    not daemons (``threading._shutdown``, which the interpreter calls: it first runs the exit
    hooks of ``concurrent.futures``, whose idle workers would otherwise wait forever), run the
    atexit handlers (vLLM's engine shutdown among them), flush stdout and stderr. The teardown of
    the modules is left out: its collections would write to every page the child still shares
    with the server, for seconds, and nothing is reported after it."""
    threading._shutdown()
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return 120  # the interpreter's status when it cannot flush
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", type=Path, required=True, help="listen on this Unix socket")
    parser.add_argument("--preload", default="", help="modules to import, comma-separated")
    parser.add_argument("--preload-output", type=Path, required=True, help="their output here")
    add_result_argument(parser)
    args = parser.parse_args(argv)

    modules = [name for name in args.preload.split(",") if name]
    try:
        _preload(modules)
    except BaseException as error:  # noqa: BLE001  (any failure: the parent runs fresh)
        write_result(args.result, {"ready": False, "why": f"preload failed: {error!r}"})
        return 0
    sys.stdout.flush()
    sys.stderr.flush()
    if not hasattr(os, "pidfd_open"):
        write_result(args.result, {"ready": False, "why": "no os.pidfd_open (Linux 5.3)"})
        return 0
    busy = busy_threads()
    for _ in range(BUSY_RETRIES):  # a pool thread spins a while before it waits
        if not busy:
            break
        time.sleep(BUSY_WAIT_S)
        busy = busy_threads()
    if busy:
        write_result(args.result, {"ready": False, "why": f"threads at work: {busy}"})
        return 0
    # The preload's objects move to the collector's permanent generation: a child's collections
    # (vLLM collects several times while it starts) then neither scan them nor write to their
    # pages, which the fork shares until written. A collection vLLM makes after its own
    # `gc.unfreeze()` scans them again, as in a fresh interpreter.
    gc.collect()
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(str(args.socket))
    listener.listen(16)
    top_level = sorted({name.partition(".")[0] for name in sys.modules})
    write_result(args.result, {"ready": True, "pid": os.getpid(), "modules": top_level})
    preload_output = args.preload_output.read_text(errors="replace")
    request = Server(listener, preload_output).serve()
    if request is None:
        return 0
    run_as_main(request, preload_output)


if __name__ == "__main__":
    sys.exit(main())

"""The one way the tests and the benchmarks hear back from a child process: a result file.

The parent passes ``--result FILE``; the child writes its answer there as one JSON object,
atomically (a temporary file renamed over FILE), so the parent never reads half an answer, and
nothing depends on the child's stdout, which vLLM's log lines (and those of its engine process)
share. A one-shot child writes one answer and exits (`run_child`). A resident child
(`ResidentChild`) answers once when it is ready, then once per command line it reads on stdin:
the parent takes each answer away (removes the file) before it sends the next command, and waits
for the file to appear again or for the child to exit.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

RESULT_FLAG = "--result"
#: seconds between two looks for a resident child's answer
POLL_S = 0.05


def add_result_argument(parser: argparse.ArgumentParser) -> None:
    """The child's side of the protocol on its command line: ``--result FILE``."""
    parser.add_argument(
        RESULT_FLAG, type=Path, required=True, help="write the answer here (one JSON object)"
    )


def write_result(path: Path, data: object) -> None:
    """Write one answer to ``path`` atomically: the reader sees all of it or nothing."""
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data))
    os.replace(partial, path)


def answer_commands(
    commands: Iterable[str],
    path: Path,
    ready: dict,
    handlers: dict[str, Callable[[list[str]], dict]],
) -> None:
    """A resident child's loop: answer ``ready``, then each command line (its first word names
    the handler, which gets all its words) until ``quit`` or the end of ``commands``."""
    write_result(path, ready)
    for line in commands:
        words = line.split()
        if not words:
            continue
        if words == ["quit"]:
            return
        handler = handlers.get(words[0])
        if handler is None:
            answer = {"error": f"unknown command {words[0]!r}; allowed: {', '.join(handlers)}"}
        else:
            answer = handler(words)
        write_result(path, answer)


@dataclass
class ChildRun:
    """One finished child: its answer (None when it wrote none or failed), its whole output
    (stdout and stderr interleaved), its exit status and wall time, and whether a fork server
    ran it (`vllm_fl.testing.zygotes`) rather than a fresh interpreter."""

    result: dict | None
    output: str
    wall_s: float
    returncode: int = 0
    forked: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.result is not None

    def lines(self, needle: str) -> list[str]:
        return [line for line in self.output.splitlines() if needle in line]

    def tail(self, lines: int) -> list[str]:
        return self.output.strip().splitlines()[-lines:]


def run_child(
    argv: list[str],
    env: dict[str, str],
    *,
    timeout: float,
    cwd: str | Path | None = None,
) -> ChildRun:
    """Run ``argv --result FILE`` with exactly the environment ``env`` and read its answer.
    Raises subprocess.TimeoutExpired when it outlives ``timeout`` seconds."""
    with tempfile.TemporaryDirectory(prefix="vllm-fl-child-") as tmp:
        path = Path(tmp) / "result.json"
        start = time.perf_counter()
        proc = subprocess.run(
            [*argv, RESULT_FLAG, str(path)],
            env=env,
            cwd=None if cwd is None else str(cwd),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
        )
        wall = time.perf_counter() - start
        result = None
        if proc.returncode == 0 and path.exists():
            result = json.loads(path.read_text())
    return ChildRun(result=result, output=proc.stdout, wall_s=wall, returncode=proc.returncode)


class ChildError(RuntimeError):
    """A resident child exited, or did not answer in time; the message ends with its log's tail."""


class ResidentChild:
    """A child that stays up and answers commands (``argv --result FILE``), its output in
    ``log``."""

    def __init__(
        self, name: str, argv: list[str], env: dict[str, str], log: Path, cwd: Path | None = None
    ):
        self.name, self.log = name, Path(log)
        self._dir = Path(tempfile.mkdtemp(prefix="vllm-fl-child-"))
        self._path = self._dir / "result.json"
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._output = self.log.open("w")
        self.proc = subprocess.Popen(
            [*argv, RESULT_FLAG, str(self._path)],
            env=env,
            cwd=None if cwd is None else str(cwd),
            stdin=subprocess.PIPE,
            stdout=self._output,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def answer(self, timeout: float) -> dict:
        """The child's next answer (taken away); ChildError where it exits or takes over
        ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            exited = self.proc.poll() is not None
            if self._path.exists():
                data = json.loads(self._path.read_text())
                self._path.unlink()
                return data
            if exited or time.monotonic() > deadline:
                break
            time.sleep(POLL_S)
        raise ChildError(f"{self.name}: no answer (exit status {self.proc.poll()})\n{self.tail()}")

    def ask(self, command: str, timeout: float) -> dict:
        """Send one command line; the child's answer to it."""
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.answer(timeout)

    def close(self, timeout: float) -> dict | None:
        """Ask the child to quit; its last answer, None where it wrote none."""
        try:
            if self.proc.poll() is None:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
            return self.answer(timeout)
        except (ChildError, OSError):
            return None
        finally:
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self._output.close()
            shutil.rmtree(self._dir, ignore_errors=True)

    def tail(self, lines: int = 15) -> str:
        self._output.flush()
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

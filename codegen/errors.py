"""The one error type of the generator: what is wrong, where, and what was expected."""

from __future__ import annotations


class CodegenError(Exception):
    """A problem the user must fix; rendered as ``<file>:<line>: <what is wrong>, expected <what>``.

    The CLI prints it and exits 1; nothing is written when one is raised.
    """

    def __init__(self, file: str, line: int | None, problem: str, expected: str | None = None):
        self.file = file
        self.line = line
        self.problem = problem
        self.expected = expected
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        text = f"{where}: {self.problem}"
        return text if self.expected is None else f"{text}, expected {self.expected}"


class ManifestError(CodegenError):
    """An error in the manifest itself (syntax, keys, types, references, signatures)."""

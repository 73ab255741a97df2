"""Reading the text files the generator consumes (ops.yaml, impl modules): UTF-8 or an error.

A stray byte must be a ``file:line`` error, not a ``UnicodeDecodeError`` traceback; a file too
large to be a manifest or a module is refused before it is parsed.
"""

from __future__ import annotations

from pathlib import Path

from .errors import CodegenError

#: far above any real manifest (18 000 ops are about 5 MB) or hand-written module
MAX_BYTES = 32 * 1024 * 1024


def decode(data: bytes, label: str) -> str:
    """``data`` as UTF-8 text; a bad byte is an error naming its line and column."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        bad = data[exc.start : exc.end].hex(" ")
        raise CodegenError(
            label,
            line,
            f"byte(s) {bad} at column {column} are not UTF-8 ({exc.reason})",
            "a UTF-8 text file",
        ) from None


def read_text(path: Path, label: str) -> str:
    """The text of ``path`` (named ``label`` in errors), checked as above."""
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise CodegenError(
                label, None, f"the file has {size} bytes", f"at most {MAX_BYTES} bytes"
            )
        return decode(path.read_bytes(), label)
    except OSError as exc:
        raise CodegenError(
            label, None, f"cannot read the file ({exc.strerror})", "a readable file"
        ) from None

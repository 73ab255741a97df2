"""Writing ``FLAGGEMS_ENABLE_OPLIST_PATH`` safely.

The default path lies in ``/tmp``, where anyone can plant a symlink to a file of ours before we
write. So the file is written to a fresh temporary file in the same directory (created with
``O_EXCL``, never an existing file) and renamed over the path: a rename replaces a symlink
itself instead of writing through it, and readers see either the old list or the new one,
never a half-written file.
"""

from __future__ import annotations

import os
import tempfile

__all__ = ["write_atomically"]


def write_atomically(path: str, text: str) -> None:
    """Replace ``path`` with a file holding ``text``, without following a symlink at ``path``.
    Raises ``OSError`` when the directory is not writable or ``path`` is a directory; no
    temporary file is left behind."""
    directory, name = os.path.split(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), 0o644)  # mkstemp's 0600 would hide the list from FlagGems
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise

"""``FLAGGEMS_ENABLE_OPLIST_PATH``: the ops the dispatch currently runs on FlagGems, one per line.

``write_oplist`` is a selection listener of the backend (``BACKEND.selection_listeners`` in the
package ``__init__``): the manager whose registry holds the backend calls it after every
selection it installs. It rewrites the file whenever the
set of ops whose selected implementation (for eager calls or calls traced by torch.compile) is a
FlagGems one changes, and never writes it while that set stays empty.

The default path lies in ``/tmp``, where anyone can plant a symlink to a file of ours before we
write. So the file is written to a fresh temporary file in the same directory (created with
``O_EXCL``, never an existing file) and renamed over the path: a rename replaces a symlink
itself instead of writing through it, and readers see either the old list or the new one,
never a half-written file.
"""

from __future__ import annotations

import os
import tempfile
import weakref
from typing import TYPE_CHECKING

from vllm_fl.dispatch import BackendImplKind, get_config, get_logger

if TYPE_CHECKING:  # the runtime calls this backend, never the other way round
    from vllm_fl.dispatch import OpManager

__all__ = ["write_oplist", "write_atomically"]

logger = get_logger()
# manager -> the ops its last written list named
_written: "weakref.WeakKeyDictionary[OpManager, tuple[str, ...]]" = weakref.WeakKeyDictionary()


def write_oplist(manager: "OpManager") -> None:
    """Write the ops ``manager`` runs on FlagGems now to ``FLAGGEMS_ENABLE_OPLIST_PATH``, unless
    they are the ones written last. A file that cannot be written is a WARNING."""
    ops = tuple(
        sorted({i.op_name for i in manager.impls_in_use() if i.kind is BackendImplKind.DEFAULT})
    )
    if ops == _written.get(manager, ()):
        return
    path = get_config().flaggems_enable_oplist_path
    try:
        write_atomically(path, "".join(f"{op}\n" for op in ops))
    except OSError as exc:
        logger.warning("cannot write FLAGGEMS_ENABLE_OPLIST_PATH=%s: %s", path, exc)
    _written[manager] = ops


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

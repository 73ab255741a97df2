"""FlagCX collectives backend (``vendor:flagcx``): FlagOpen's cross-chip communication library
(``libflagcx.so``, C API ``flagcx.h``), loaded with ctypes from the directory ``FLAGCX_PATH``
names (``scripts/build_flagcx.sh`` builds it there from FlagCX's source).

``library`` binds the C functions, ``capi`` declares the C types they use, ``impl/`` holds the
collectives. The package declares:

- ``PROBE``: the backend is available when ``FLAGCX_PATH`` is set and the library in it loads
  (``explain`` shows why not otherwise);
- ``BACKEND.communicator_setup``: makes the FlagCX communicator of a process group (rank 0 of
  the group makes the unique id, the group's CPU group hands it to the others), held in the
  communicator's ``backend_state["flagcx"]``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from vllm_fl.dispatch import Backend, get_config

__all__ = ["BACKEND", "PROBE", "FlagcxGroup", "LibraryProbe", "load_library"]


def load_library() -> Any:
    """The ``FlagcxLibrary`` of ``FLAGCX_PATH``; raises ``FlagcxUnavailable`` naming the path
    and what is missing (also when ``FLAGCX_PATH`` is unset)."""
    from .library import FlagcxLibrary, FlagcxUnavailable

    path = get_config().flagcx_path
    if path is None:
        raise FlagcxUnavailable(
            "FLAGCX_PATH is not set (the directory holding lib/libflagcx.so; "
            "scripts/build_flagcx.sh builds one)"
        )
    return FlagcxLibrary.load(path)


class LibraryProbe:
    """Available when ``load_library`` succeeds; ``reason`` says why not. Evaluated once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reason: str | None = None
        self._done = False

    def _result(self) -> str | None:
        with self._lock:
            if not self._done:
                try:
                    load_library()
                except Exception as exc:  # noqa: BLE001 - a probe reports, never raises
                    self._reason = str(exc)
                self._done = True
            return self._reason

    def __call__(self) -> bool:
        return self._result() is None

    @property
    def reason(self) -> str | None:
        return self._result()

    def __repr__(self) -> str:
        return "LibraryProbe(FLAGCX_PATH)"


PROBE = LibraryProbe()


@dataclass
class FlagcxGroup:
    """A process group's FlagCX communicator and the library it came from."""

    library: Any  # FlagcxLibrary
    comm: Any  # FlagcxComm


def set_up_group(communicator: Any) -> FlagcxGroup:
    """``communicator_setup``: this rank's FlagCX communicator for ``communicator``'s group,
    made collectively (every rank of the group calls it)."""
    library = load_library()
    unique_id = library.unique_id() if communicator.rank_in_group == 0 else None
    unique_id = communicator.broadcast_object(unique_id, src=0)
    comm = library.init_comm(communicator.world_size, communicator.rank_in_group, unique_id)
    return FlagcxGroup(library, comm)


BACKEND = Backend("flagcx", communicator_setup=set_up_group)

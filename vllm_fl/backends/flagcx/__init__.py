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

from dataclasses import dataclass
from typing import Any

from vllm_fl.dispatch import Backend, Probe, get_config

__all__ = ["BACKEND", "PROBE", "FlagcxGroup", "library_unavailable", "load_library"]


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


def library_unavailable() -> str | None:
    """None when ``load_library`` succeeds; else why not."""
    try:
        load_library()
    except Exception as exc:  # noqa: BLE001 - a probe reports, never raises
        return str(exc)
    return None


PROBE = Probe.of(library_unavailable, "FLAGCX_PATH")


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

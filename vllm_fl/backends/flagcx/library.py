"""A ctypes binding of FlagCX (``libflagcx.so``) with a small typed API over torch tensors.

    lib = FlagcxLibrary.load("/opt/flagcx")          # finds lib/libflagcx.so or libflagcx.so
    uid = lib.unique_id()                             # on rank 0; hand the bytes to every rank
    comm = lib.init_comm(world_size, rank, uid)       # collective: every rank calls it
    lib.all_reduce(comm, x, y, torch.cuda.current_stream())
    lib.destroy_comm(comm)

Importing this module imports neither torch nor vLLM; the methods that take tensors import
torch. A collective is enqueued on the given device stream and returns at once, as NCCL's do.

FlagCX takes its streams as ``flagcxStream_t``, a struct of its device adaptor wrapping the
vendor stream; ``stream_of`` makes one per raw stream handle with the adaptor's ``streamCopy``
(as FlagCX's own Python wrapper does) and keeps it until ``close``.

With the NVIDIA adaptor, ``libflagcx.so`` needs ``libnccl.so.2`` and the driver's
``libcuda.so.1``: in a process that has imported a CUDA build of torch, NCCL is already loaded
and is the one FlagCX uses.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from vllm_fl.backends.flagcx import capi
from vllm_fl.backends.flagcx.capi import DataType, RedOp, Result

if TYPE_CHECKING:
    import torch

__all__ = [
    "DataType",
    "FlagcxComm",
    "FlagcxError",
    "FlagcxLibrary",
    "FlagcxUnavailable",
    "RedOp",
    "flagcx_dtype",
]

LIBRARY_NAME = "libflagcx.so"

#: torch dtypes by name (``str(dtype)`` less ``torch.``) and the FlagCX type each maps to
TORCH_DTYPES: dict[str, DataType] = {
    "int8": DataType.INT8,
    "uint8": DataType.UINT8,
    "int32": DataType.INT32,
    "uint32": DataType.UINT32,
    "int64": DataType.INT64,
    "uint64": DataType.UINT64,
    "float16": DataType.FLOAT16,
    "float32": DataType.FLOAT32,
    "float64": DataType.FLOAT64,
    "bfloat16": DataType.BFLOAT16,
}

#: what ``dlopen`` may report missing, and where it comes from
_MISSING_HINTS = {
    "libnccl.so.2": "NCCL: import a CUDA build of torch first (it loads its nvidia-nccl "
    "wheel's libnccl.so.2), or add NCCL's lib/ to LD_LIBRARY_PATH",
    "libcuda.so.1": "the NVIDIA driver: this machine has none",
    "libcudart.so": "the CUDA runtime FlagCX was built against: keep it next to libflagcx.so",
}

#: a device stream: None (the default stream), a raw handle (``torch.cuda.Stream.cuda_stream``),
#: or an object with a ``cuda_stream`` attribute (``torch.cuda.Stream``)
Stream = Any


class FlagcxUnavailable(RuntimeError):
    """FlagCX cannot be loaded from the given path; the message says which path and why."""


class FlagcxError(RuntimeError):
    """A FlagCX call returned an error."""

    def __init__(self, function: str, result: int, detail: str = "") -> None:
        self.function = function
        self.result = result
        try:
            name = Result(result).name
        except ValueError:
            name = "unknown result"
        message = f"{function} failed: {name} ({result})"
        super().__init__(f"{message}: {detail}" if detail else message)


@dataclass(eq=False)
class FlagcxComm:
    """One rank's communicator, made by ``FlagcxLibrary.init_comm``."""

    handle: ctypes.c_void_p
    world_size: int
    rank: int
    #: FlagCX keeps a pointer to the unique id it was made from (its tuner reads it later)
    unique_id: capi.UniqueId = field(repr=False)
    destroyed: bool = False


def flagcx_dtype(dtype: torch.dtype) -> DataType:
    """The FlagCX data type of a torch dtype; ValueError naming those supported otherwise."""
    name = str(dtype).removeprefix("torch.")
    try:
        return TORCH_DTYPES[name]
    except KeyError:
        raise ValueError(
            f"FlagCX has no data type for torch.{name}; supported: {', '.join(TORCH_DTYPES)}"
        ) from None


def library_candidates(path: Path) -> tuple[Path, ...]:
    """Where ``load`` looks for the library under ``path``, in order."""
    return (path / "lib" / LIBRARY_NAME, path / LIBRARY_NAME)


def _find_library(path: str | os.PathLike[str] | None) -> Path:
    if path is None:
        raise FlagcxUnavailable(
            "no FlagCX directory given (path is None): set FLAGCX_PATH to the directory "
            f"holding lib/{LIBRARY_NAME}"
        )
    root = Path(path)
    if not root.exists():
        raise FlagcxUnavailable(f"FlagCX directory {str(root)!r} does not exist")
    if not root.is_dir():
        raise FlagcxUnavailable(f"FlagCX path {str(root)!r} is not a directory")
    candidates = library_candidates(root)
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    looked = ", ".join(str(c) for c in candidates)
    raise FlagcxUnavailable(
        f"no {LIBRARY_NAME} in FlagCX directory {str(root)!r} (looked at {looked})"
    )


def _open(library: Path) -> ctypes.CDLL:
    try:
        return ctypes.CDLL(str(library))
    except OSError as error:
        hints = [hint for lib, hint in _MISSING_HINTS.items() if lib in str(error)]
        suffix = f" (missing {'; '.join(hints)})" if hints else ""
        raise FlagcxUnavailable(f"cannot load {library}: {error}{suffix}") from error


def _bind(cdll: ctypes.CDLL, library: Path) -> dict[str, Any]:
    functions: dict[str, Any] = {}
    for signature in capi.SIGNATURES:
        try:
            function = getattr(cdll, signature.name)
        except AttributeError:
            raise FlagcxUnavailable(
                f"{library} does not export {signature.name} (not a FlagCX library, or one "
                "older than this binding)"
            ) from None
        function.restype = signature.restype
        function.argtypes = list(signature.argtypes)
        functions[signature.name] = function
    return functions


class FlagcxLibrary:
    """FlagCX's C functions, bound once per library file (``load`` returns the same object for
    the same file)."""

    _loaded: ClassVar[dict[Path, FlagcxLibrary]] = {}

    def __init__(self, library: Path, functions: dict[str, Any]) -> None:
        self.path = library
        self._fn = functions
        self._handler: Any = None  # POINTER(HandlerGroup), made on first use
        self._streams: dict[int, ctypes.c_void_p] = {}
        self._free = ctypes.CDLL(None).free
        self._free.argtypes = [ctypes.c_void_p]
        self._free.restype = None

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None) -> FlagcxLibrary:
        """Load ``libflagcx.so`` from ``path/lib`` or ``path``.

        Raises FlagcxUnavailable, naming the path, when ``path`` is None, is no directory,
        holds no library, or the library fails to load or lacks a function bound here."""
        try:
            library = _find_library(path).resolve()
        except OSError as error:  # e.g. a directory this user may not read
            raise FlagcxUnavailable(
                f"cannot search FlagCX directory {str(path)!r}: {error}"
            ) from error
        if library not in cls._loaded:
            cls._loaded[library] = cls(library, _bind(_open(library), library))
        return cls._loaded[library]

    # -- errors, version --------------------------------------------------------------------

    def _check(self, function: str, result: int, comm: FlagcxComm | None = None) -> None:
        if result == Result.SUCCESS:
            return
        detail = ""
        if comm is not None and not comm.destroyed:
            last = self._fn["flagcxGetLastError"](comm.handle)
            detail = last.decode(errors="replace") if last else ""
        raise FlagcxError(function, result, detail)

    def version(self) -> int:
        """``flagcxGetVersion``: major * 10000 + minor * 100 + patch (FlagCX 1.0.0: 10000)."""
        version = ctypes.c_int()
        self._check("flagcxGetVersion", self._fn["flagcxGetVersion"](ctypes.byref(version)))
        return version.value

    # -- communicators ----------------------------------------------------------------------

    def unique_id(self) -> bytes:
        """``flagcxGetUniqueId``: the 256 bytes every rank passes to ``init_comm``. Rank 0 makes
        it (this starts FlagCX's bootstrap listener in this process) and sends it to the rest."""
        pointer = ctypes.POINTER(capi.UniqueId)()
        try:
            self._check("flagcxGetUniqueId", self._fn["flagcxGetUniqueId"](ctypes.byref(pointer)))
            return ctypes.string_at(pointer, capi.UNIQUE_ID_BYTES)
        finally:
            if pointer:  # FlagCX mallocs it for the caller
                self._free(ctypes.cast(pointer, ctypes.c_void_p))

    def init_comm(self, world_size: int, rank: int, unique_id: bytes) -> FlagcxComm:
        """``flagcxCommInitRank``: this rank's communicator. Every rank calls it at once, with
        the same ``unique_id``, after selecting its device (``torch.cuda.set_device``)."""
        if len(unique_id) != capi.UNIQUE_ID_BYTES:
            raise ValueError(
                f"a FlagCX unique id has {capi.UNIQUE_ID_BYTES} bytes, got {len(unique_id)}"
            )
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, {world_size})")
        uid = capi.UniqueId.from_buffer_copy(unique_id)
        handle = ctypes.c_void_p()
        self._check(
            "flagcxCommInitRank",
            self._fn["flagcxCommInitRank"](
                ctypes.byref(handle), world_size, ctypes.byref(uid), rank
            ),
        )
        return FlagcxComm(handle=handle, world_size=world_size, rank=rank, unique_id=uid)

    def destroy_comm(self, comm: FlagcxComm) -> None:
        """``flagcxCommDestroy``; a second call does nothing."""
        if comm.destroyed:
            return
        self._check("flagcxCommDestroy", self._fn["flagcxCommDestroy"](comm.handle), comm)
        comm.destroyed = True

    def is_homogeneous(self, comm: FlagcxComm) -> bool:
        """``flagcxIsHomoComm``: whether every rank has the same vendor's device (then FlagCX
        calls that vendor's CCL directly)."""
        value = ctypes.c_int()
        self._check(
            "flagcxIsHomoComm",
            self._fn["flagcxIsHomoComm"](self._live(comm), ctypes.byref(value)),
            comm,
        )
        return bool(value.value)

    def comm_size_and_rank(self, comm: FlagcxComm) -> tuple[int, int]:
        """``flagcxCommCount`` and ``flagcxCommUserRank``, as FlagCX itself reports them."""
        count, rank = ctypes.c_int(), ctypes.c_int()
        handle = self._live(comm)
        self._check(
            "flagcxCommCount", self._fn["flagcxCommCount"](handle, ctypes.byref(count)), comm
        )
        self._check(
            "flagcxCommUserRank", self._fn["flagcxCommUserRank"](handle, ctypes.byref(rank)), comm
        )
        return count.value, rank.value

    @staticmethod
    def _live(comm: FlagcxComm) -> ctypes.c_void_p:
        if comm.destroyed:
            raise ValueError(f"FlagCX communicator of rank {comm.rank} was destroyed")
        return comm.handle

    # -- streams ----------------------------------------------------------------------------

    def _device_handle(self) -> Any:
        if self._handler is None:
            handler = ctypes.POINTER(capi.HandlerGroup)()
            self._check("flagcxHandleInit", self._fn["flagcxHandleInit"](ctypes.byref(handler)))
            self._handler = handler
        return self._handler.contents.devHandle.contents

    def stream_of(self, stream: Stream) -> ctypes.c_void_p:
        """The ``flagcxStream_t`` wrapping a device stream (see ``Stream``), made once per raw
        handle with the device adaptor's ``streamCopy`` (which wraps, never creates, a stream)."""
        raw = int(getattr(stream, "cuda_stream", stream) or 0)
        wrapped = self._streams.get(raw)
        if wrapped is None:
            wrapped = ctypes.c_void_p()
            result = self._device_handle().streamCopy(ctypes.byref(wrapped), ctypes.c_void_p(raw))
            self._check("flagcxDeviceHandle.streamCopy", result)
            wrapped = self._streams.setdefault(raw, wrapped)
        return wrapped

    def synchronize(self, stream: Stream) -> None:
        """Wait for the work enqueued on ``stream`` (the adaptor's ``streamSynchronize``)."""
        result = self._device_handle().streamSynchronize(self.stream_of(stream))
        self._check("flagcxDeviceHandle.streamSynchronize", result)

    def close(self) -> None:
        """Free the stream wrappers (not the streams) and the handler group; the library stays
        usable and makes new ones on demand."""
        if self._handler is None:
            return
        device = self._handler.contents.devHandle.contents
        for wrapped in self._streams.values():
            device.streamFree(wrapped)
        self._streams.clear()
        self._fn["flagcxHandleFree"](self._handler)
        self._handler = None

    # -- collectives ------------------------------------------------------------------------

    def all_reduce(
        self,
        comm: FlagcxComm,
        in_tensor: torch.Tensor,
        out_tensor: torch.Tensor,
        stream: Stream = None,
        op: RedOp = RedOp.SUM,
    ) -> None:
        """``flagcxAllReduce``: ``out = op(in of every rank)``; in place when they are one."""
        dtype = _same_dtype(in_tensor, out_tensor)
        _expect_numel("all_reduce out", out_tensor, in_tensor.numel())
        self._check(
            "flagcxAllReduce",
            self._fn["flagcxAllReduce"](
                _ptr(in_tensor),
                _ptr(out_tensor),
                in_tensor.numel(),
                dtype,
                op,
                self._live(comm),
                self.stream_of(stream),
            ),
            comm,
        )

    def all_gather(
        self,
        comm: FlagcxComm,
        in_tensor: torch.Tensor,
        out_tensor: torch.Tensor,
        stream: Stream = None,
    ) -> None:
        """``flagcxAllGather``: ``out`` is every rank's ``in``, concatenated in rank order."""
        dtype = _same_dtype(in_tensor, out_tensor)
        _expect_numel("all_gather out", out_tensor, in_tensor.numel() * comm.world_size)
        self._check(
            "flagcxAllGather",
            self._fn["flagcxAllGather"](
                _ptr(in_tensor),
                _ptr(out_tensor),
                in_tensor.numel(),
                dtype,
                self._live(comm),
                self.stream_of(stream),
            ),
            comm,
        )

    def reduce_scatter(
        self,
        comm: FlagcxComm,
        in_tensor: torch.Tensor,
        out_tensor: torch.Tensor,
        stream: Stream = None,
        op: RedOp = RedOp.SUM,
    ) -> None:
        """``flagcxReduceScatter``: ``out`` on rank i is block i of ``op(in of every rank)``."""
        dtype = _same_dtype(in_tensor, out_tensor)
        _expect_numel("reduce_scatter in", in_tensor, out_tensor.numel() * comm.world_size)
        self._check(
            "flagcxReduceScatter",
            self._fn["flagcxReduceScatter"](
                _ptr(in_tensor),
                _ptr(out_tensor),
                out_tensor.numel(),
                dtype,
                op,
                self._live(comm),
                self.stream_of(stream),
            ),
            comm,
        )

    def broadcast(
        self,
        comm: FlagcxComm,
        in_tensor: torch.Tensor,
        out_tensor: torch.Tensor,
        root: int,
        stream: Stream = None,
    ) -> None:
        """``flagcxBroadcast``: ``out`` on every rank is ``in`` of rank ``root`` (only the
        root's ``in`` is read); in place when they are one."""
        dtype = _same_dtype(in_tensor, out_tensor)
        _expect_numel("broadcast in", in_tensor, out_tensor.numel())
        self._check(
            "flagcxBroadcast",
            self._fn["flagcxBroadcast"](
                _ptr(in_tensor),
                _ptr(out_tensor),
                out_tensor.numel(),
                dtype,
                root,
                self._live(comm),
                self.stream_of(stream),
            ),
            comm,
        )

    def send(
        self, comm: FlagcxComm, tensor: torch.Tensor, peer: int, stream: Stream = None
    ) -> None:
        """``flagcxSend`` of ``tensor`` to rank ``peer``, which calls ``recv`` with as many
        elements of the same dtype. Pair sends and receives that must progress together in
        one ``group``."""
        self._check(
            "flagcxSend",
            self._fn["flagcxSend"](
                _ptr(tensor),
                tensor.numel(),
                flagcx_dtype(tensor.dtype),
                peer,
                self._live(comm),
                self.stream_of(stream),
            ),
            comm,
        )

    def recv(
        self, comm: FlagcxComm, tensor: torch.Tensor, peer: int, stream: Stream = None
    ) -> None:
        """``flagcxRecv`` into ``tensor`` from rank ``peer``."""
        self._check(
            "flagcxRecv",
            self._fn["flagcxRecv"](
                _ptr(tensor),
                tensor.numel(),
                flagcx_dtype(tensor.dtype),
                peer,
                self._live(comm),
                self.stream_of(stream),
            ),
            comm,
        )

    def group_start(self, comm: FlagcxComm) -> None:
        """``flagcxGroupStart``: calls until ``group_end`` are fused into one operation."""
        self._check("flagcxGroupStart", self._fn["flagcxGroupStart"](self._live(comm)), comm)

    def group_end(self, comm: FlagcxComm) -> None:
        """``flagcxGroupEnd``: enqueue the operations since ``group_start``."""
        self._check("flagcxGroupEnd", self._fn["flagcxGroupEnd"](self._live(comm)), comm)

    @contextlib.contextmanager
    def group(self, comm: FlagcxComm) -> Iterator[None]:
        """``group_start`` ... ``group_end`` around the block (ended also when it raises)."""
        self.group_start(comm)
        try:
            yield
        finally:
            self.group_end(comm)


def _ptr(tensor: torch.Tensor) -> ctypes.c_void_p:
    if not tensor.is_contiguous():
        raise ValueError(f"FlagCX needs contiguous tensors, got strides {tuple(tensor.stride())}")
    return ctypes.c_void_p(tensor.data_ptr())


def _same_dtype(in_tensor: torch.Tensor, out_tensor: torch.Tensor) -> DataType:
    if in_tensor.dtype != out_tensor.dtype:
        raise ValueError(f"in and out dtypes differ: {in_tensor.dtype} and {out_tensor.dtype}")
    return flagcx_dtype(in_tensor.dtype)


def _expect_numel(what: str, tensor: torch.Tensor, numel: int) -> None:
    if tensor.numel() != numel:
        raise ValueError(f"{what} has {tensor.numel()} elements, expected {numel}")

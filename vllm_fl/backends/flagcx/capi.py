"""The part of FlagCX's C API (``flagcx/include/flagcx.h``) that ``library`` calls, as ctypes
declarations: enums, structs, and each bound function's signature.

Struct layouts and enum values are copied from ``flagcx.h``; a field added there upstream must
be added here in the same place, or every field after it is read from the wrong offset.
"""

from __future__ import annotations

import ctypes
import enum
from dataclasses import dataclass
from typing import Any

#: ``FLAGCX_UNIQUE_ID_BYTES``
UNIQUE_ID_BYTES = 256


class Result(enum.IntEnum):
    """``flagcxResult_t``."""

    SUCCESS = 0
    UNHANDLED_DEVICE_ERROR = 1
    SYSTEM_ERROR = 2
    INTERNAL_ERROR = 3
    INVALID_ARGUMENT = 4
    INVALID_USAGE = 5
    REMOTE_ERROR = 6
    IN_PROGRESS = 7
    UNHANDLED_CCL_ERROR = 8
    NOT_SUPPORTED = 9


class DataType(enum.IntEnum):
    """``flagcxDataType_t`` (its aliases ``flagcxChar``, ``flagcxInt``, ... left out)."""

    INT8 = 0
    UINT8 = 1
    INT32 = 2
    UINT32 = 3
    INT64 = 4
    UINT64 = 5
    FLOAT16 = 6
    FLOAT32 = 7
    FLOAT64 = 8
    BFLOAT16 = 9


class RedOp(enum.IntEnum):
    """``flagcxRedOp_t``."""

    SUM = 0
    PROD = 1
    MAX = 2
    MIN = 3
    AVG = 4


# Opaque handles: flagcxComm_t, flagcxStream_t, flagcxEvent_t, flagcxIpcMemHandle_t.
comm_t = ctypes.c_void_p
stream_t = ctypes.c_void_p
event_t = ctypes.c_void_p
ipc_mem_handle_t = ctypes.c_void_p
result_t = ctypes.c_int
enum_t = ctypes.c_int


class UniqueId(ctypes.Structure):
    """``flagcxUniqueId``: 256 opaque bytes, made by rank 0 and handed to every rank."""

    _fields_ = [("internal", ctypes.c_byte * UNIQUE_ID_BYTES)]


def _fn(*argtypes: Any) -> Any:
    """A C function pointer type returning ``flagcxResult_t``."""
    return ctypes.CFUNCTYPE(result_t, *argtypes)


_P = ctypes.POINTER


class DeviceHandle(ctypes.Structure):
    """``struct flagcxDeviceHandle``: the device adaptor's runtime functions (streams, events,
    memory), in ``flagcx.h``'s order."""

    _fields_ = [
        ("deviceSynchronize", _fn()),
        ("deviceMemcpy", _fn(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, enum_t, stream_t)),
        ("deviceMemset", _fn(ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, enum_t, stream_t)),
        ("deviceMalloc", _fn(_P(ctypes.c_void_p), ctypes.c_size_t, enum_t, stream_t)),
        ("deviceFree", _fn(ctypes.c_void_p, enum_t, stream_t)),
        ("setDevice", _fn(ctypes.c_int)),
        ("getDevice", _fn(_P(ctypes.c_int))),
        ("getDeviceCount", _fn(_P(ctypes.c_int))),
        ("getVendor", _fn(ctypes.c_char_p)),
        ("hostGetDevicePointer", _fn(_P(ctypes.c_void_p), ctypes.c_void_p)),
        ("streamCreate", _fn(_P(stream_t))),
        ("streamDestroy", _fn(stream_t)),
        ("streamCopy", _fn(_P(stream_t), ctypes.c_void_p)),
        ("streamFree", _fn(stream_t)),
        ("streamSynchronize", _fn(stream_t)),
        ("streamQuery", _fn(stream_t)),
        ("streamWaitEvent", _fn(stream_t, event_t)),
        ("eventCreate", _fn(_P(event_t), enum_t)),
        ("eventDestroy", _fn(event_t)),
        ("eventRecord", _fn(event_t, stream_t)),
        ("eventSynchronize", _fn(event_t)),
        ("eventQuery", _fn(event_t)),
        ("ipcMemHandleCreate", _fn(_P(ipc_mem_handle_t), _P(ctypes.c_size_t))),
        ("ipcMemHandleGet", _fn(ipc_mem_handle_t, ctypes.c_void_p)),
        ("ipcMemHandleOpen", _fn(ipc_mem_handle_t, _P(ctypes.c_void_p))),
        ("ipcMemHandleClose", _fn(ctypes.c_void_p)),
        ("ipcMemHandleFree", _fn(ipc_mem_handle_t)),
    ]


class HandlerGroup(ctypes.Structure):
    """``struct flagcxHandlerGroup``, made by ``flagcxHandleInit``; only its ``devHandle`` is
    used here (to wrap a device stream as a ``flagcxStream_t``)."""

    _fields_ = [
        ("uniqueId", _P(UniqueId)),
        ("comm", comm_t),
        ("devHandle", _P(DeviceHandle)),
    ]


@dataclass(frozen=True)
class Signature:
    """One exported C function: its name in ``flagcx.h``, return type and argument types."""

    name: str
    restype: Any
    argtypes: tuple[Any, ...]


_buf = ctypes.c_void_p
_size = ctypes.c_size_t
_int = ctypes.c_int

#: every function ``library`` binds; loading fails, naming it, if the library lacks one
SIGNATURES: tuple[Signature, ...] = (
    Signature("flagcxGetVersion", result_t, (_P(_int),)),
    Signature("flagcxGetErrorString", ctypes.c_char_p, (result_t,)),
    Signature("flagcxGetLastError", ctypes.c_char_p, (comm_t,)),
    Signature("flagcxHandleInit", result_t, (_P(_P(HandlerGroup)),)),
    Signature("flagcxHandleFree", result_t, (_P(HandlerGroup),)),
    Signature("flagcxGetUniqueId", result_t, (_P(_P(UniqueId)),)),
    Signature("flagcxCommInitRank", result_t, (_P(comm_t), _int, _P(UniqueId), _int)),
    Signature("flagcxCommDestroy", result_t, (comm_t,)),
    Signature("flagcxCommCount", result_t, (comm_t, _P(_int))),
    Signature("flagcxCommUserRank", result_t, (comm_t, _P(_int))),
    Signature("flagcxIsHomoComm", result_t, (comm_t, _P(_int))),
    Signature("flagcxAllReduce", result_t, (_buf, _buf, _size, enum_t, enum_t, comm_t, stream_t)),
    Signature("flagcxAllGather", result_t, (_buf, _buf, _size, enum_t, comm_t, stream_t)),
    Signature(
        "flagcxReduceScatter", result_t, (_buf, _buf, _size, enum_t, enum_t, comm_t, stream_t)
    ),
    Signature("flagcxBroadcast", result_t, (_buf, _buf, _size, enum_t, _int, comm_t, stream_t)),
    Signature("flagcxSend", result_t, (_buf, _size, enum_t, _int, comm_t, stream_t)),
    Signature("flagcxRecv", result_t, (_buf, _size, enum_t, _int, comm_t, stream_t)),
    Signature("flagcxGroupStart", result_t, (comm_t,)),
    Signature("flagcxGroupEnd", result_t, (comm_t,)),
)

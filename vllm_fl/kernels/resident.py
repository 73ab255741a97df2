"""Layer weights whose device storage a backend gives back once it holds its own layout of them.

A vendor kernel that wants its own weight layout (Machete's, Marlin's) keeps a repacked copy of
an op's canonical weight. Keeping the canonical as well would hold the weight twice on the
device, where vanilla vLLM, which repacks in place, holds it once: 3.25 GiB of a 4-bit
Llama-3-8B that the KV cache no longer gets. :func:`release` copies the canonical to host memory
and frees its device storage. The tensor keeps its shape, strides, dtype and device, so argument
checks, the input checks of compiled graphs and fake tensors see it unchanged; its values are
gone, and reading them reads freed memory. So whatever reads the values of a weight it did not
repack itself (another backend's impl, the repacking impl building another layout) calls
:func:`resident` first, which puts them back; the weight then stays on the device. Neither step
moves the tensor's version counter: values derived from it (``TensorMemo``) stay valid.

Only a ``torch.nn.Parameter`` owning its whole storage is released (a layer's weight, not a
caller's tensor or a view of one), and only outside tracing and CUDA-graph capture.
"""

from __future__ import annotations

import weakref

import torch

__all__ = ["release", "resident", "is_released"]

# storage (its StorageImpl address, shared by every alias of the tensor) -> host copy
_host: dict[int, torch.UntypedStorage] = {}


def _key(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage()._cdata


def _busy() -> bool:
    if torch.compiler.is_compiling():
        return True
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _owns_its_storage(tensor: torch.Tensor) -> bool:
    return (
        isinstance(tensor, torch.nn.Parameter)
        and tensor.is_contiguous()
        and tensor.storage_offset() == 0
        and tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size() > 0
    )


def is_released(tensor: torch.Tensor) -> bool:
    """Whether ``tensor``'s values are on the host, its device storage freed."""
    return bool(_host) and _key(tensor) in _host


def release(tensor: torch.Tensor) -> bool:
    """Copy ``tensor``'s values to host memory and free its device storage, where it is a
    Parameter owning its whole storage (else nothing changes). Returns whether it was released
    (by this call or an earlier one)."""
    if is_released(tensor):
        return True
    if _busy() or not _owns_its_storage(tensor):
        return False
    storage = tensor.untyped_storage()
    host = torch.UntypedStorage(storage.nbytes())
    host.copy_(storage)
    key = _key(tensor)
    _host[key] = host
    # a storage freed with its tensor takes its host copy along (and its address may be reused)
    weakref.finalize(tensor, _host.pop, key, None)
    storage.resize_(0)
    return True


def resident(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` with its values on its device: a released weight gets them back (and keeps
    them); any other tensor is returned as it is."""
    if not _host or _busy():
        return tensor
    host = _host.pop(_key(tensor), None)
    if host is not None:
        storage = tensor.untyped_storage()
        storage.resize_(host.nbytes())
        storage.copy_(host)
    return tensor

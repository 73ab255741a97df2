"""Bring-up mode's per-call checks replayed as CUDA graphs.

In eager mode a verified call costs host time: the reference twice (in the call's dtype and in a
wider one) and the comparison are some fifty small device operations, each launched from Python,
which on a GPU costs far more than the device work of a decode step. The same check is repeated
with the same shapes call after call (every decode step of every layer), so `Replays` records it
once as a CUDA graph and then replays it: the call's tensors are copied into the graph's input
buffers, one graph launch does the rest, and the small statistics it leaves are copied out.

The key holds everything the recorded graph bakes in: the op and the check, each copied
tensor's shape, strides and dtype, the address of each tensor that is not copied (a layer's
weights, the paged KV cache, read where they are), the identity of other objects (the layer)
and the value of plain arguments. The first time a key is seen its check runs eagerly, with
PyTorch's synchronisation debug mode watching: a check that synchronises with the host (its
reference reads a length back, selects with a mask, copies a list to the device) can never be
recorded, and its key is marked so and keeps running eagerly. A key seen a second time without
that is recorded (so a prefill's shapes, seen once, cost no capture), and replayed from then on.
Should a capture fail nevertheless, no check of the process is recorded any more (a failed
capture can leave the allocator's capture pool engaged). Without CUDA every check runs eagerly.
The result is the same `Measure` the eager check gives, computed by the same code.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

import warnings

import torch

from vllm_fl.dispatch import get_logger

from .compare import Measure

__all__ = ["Replays"]

logger = get_logger()

#: a check is recorded when its key is seen this many times
RECORD_AT = 2
#: bytes of input buffers one recorded check may hold (larger calls are checked eagerly)
MAX_CALL_BYTES = 64 << 20
#: bytes of input buffers all recorded checks may hold together
MAX_TOTAL_BYTES = 2 << 30
#: recorded checks at most (a server's every batch size, op and layer could be many)
MAX_RECORDED = 8192
#: keys seen once that are remembered at most (forgotten all at once beyond)
MAX_SEEN = 65536

_PLAIN = (int, float, bool, str, type(None), torch.dtype, torch.device)


@dataclass
class _Recorded:
    graph: torch.cuda.CUDAGraph
    inputs: list[torch.Tensor]
    result: Measure


class _Leaves:
    """The tensors of a nested value (tuples, lists and dicts are walked into, other objects
    kept whole), split into the copied ones (``copied``) and the ones read in place (``kept``), and the key
    of everything else."""

    def __init__(self, value: Any, keep: Callable[[torch.Tensor], bool]) -> None:
        self.copied: list[torch.Tensor] = []
        self.kept: list[torch.Tensor] = []
        self._seen: dict[int, int] = {}
        self.key: list[Any] = []
        self._keep = keep
        self._walk(value)

    def _walk(self, value: Any) -> None:
        if isinstance(value, torch.Tensor):
            earlier = self._seen.get(id(value))
            if earlier is not None:
                # the same tensor again (an impl returning its input): where it was first met
                self.key.append(("same", earlier))
                return
            self._seen[id(value)] = len(self._seen)
            if self._keep(value):
                self.kept.append(value)
                self.key.append(
                    ("kept", value.data_ptr(), tuple(value.shape), value.stride(), value.dtype)
                )
            else:
                self.copied.append(value)
                self.key.append(
                    ("copied", tuple(value.shape), value.stride(), value.dtype, value.device)
                )
        elif isinstance(value, (tuple, list)):
            self.key.append((type(value).__name__, len(value)))
            for item in value:
                self._walk(item)
        elif isinstance(value, dict):
            self.key.append(("dict", tuple(value)))
            for item in value.values():
                self._walk(item)
        elif isinstance(value, _PLAIN):
            self.key.append(value)
        else:
            # a layer or another object the check reads attributes of: by identity
            self.key.append(("object", id(value)))

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.copied)


def _substituted(value: Any, replace: dict[int, torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        return replace.get(id(value), value)
    if isinstance(value, tuple):
        return tuple(_substituted(v, replace) for v in value)
    if isinstance(value, list):
        return [_substituted(v, replace) for v in value]
    if isinstance(value, dict):
        return {k: _substituted(v, replace) for k, v in value.items()}
    return value


def _watched(check: Callable[..., Measure], state: tuple) -> tuple[Measure, str | None]:
    """``check(*state)`` run eagerly, and the first synchronisation with the host it made
    (PyTorch's synchronisation debug mode, as a warning), or None."""
    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            result = check(*state)
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    for warning in caught:
        text = str(warning.message)
        if "synchroniz" in text:
            return result, text.splitlines()[0]
    return result, None


def _copied_out(result: Measure) -> Measure:
    """The recorded result's numbers in tensors of their own (the graph writes its outputs again
    on its next replay)."""
    return Measure(
        result.stats.clone() if result.stats is not None else None,
        list(result.notes),
        [(flag.clone(), note) for flag, note in result.flags],
    )


class Replays:
    """Recorded checks by key, and the ops whose checks cannot be recorded."""

    def __init__(self) -> None:
        self._recorded: dict[tuple, _Recorded] = {}
        self._seen: Counter[tuple] = Counter()
        #: (op, what) -> why some of its checks are not recorded (their keys: _synchronising)
        self.refused: dict[tuple[str, str], str] = {}
        self._synchronising: set[tuple] = set()
        #: why no check is recorded any more (a capture failed), or None
        self.failed: str | None = None
        self._bytes = 0
        self._pool: Any = None
        self._stream: torch.cuda.Stream | None = None

    @property
    def recorded(self) -> int:
        return len(self._recorded)

    def run(
        self,
        op: str,
        what: str,
        check: Callable[..., Measure],
        state: tuple,
        keep: Callable[[torch.Tensor], bool],
        constants: tuple = (),
    ) -> Measure | None:
        """``check(*state)`` replayed from its recording (recorded now if due), or None where
        the caller must run it eagerly. ``what`` names the check (one op has two: with and
        without the references); ``keep`` tells the tensors read in place (never copied: their
        addresses go into the key); ``constants`` are the plain values ``check`` depends on
        besides ``state``. The first call of a key runs ``check`` here, eagerly."""
        if self.failed is not None:
            return None
        leaves = _Leaves(state, keep)
        if not leaves.copied or any(t.device.type != "cuda" for t in leaves.copied):
            return None
        key = (op, what, constants, tuple(leaves.key))
        recorded = self._recorded.get(key)
        if recorded is None:
            if key in self._synchronising:
                return None
            if len(self._seen) >= MAX_SEEN:
                self._seen.clear()
            self._seen[key] += 1
            if self._seen[key] < RECORD_AT:
                result, synchronised = _watched(check, state)
                if synchronised:
                    self._synchronising.add(key)
                    self.refused.setdefault((op, what), synchronised)
                return result
            size = leaves.nbytes()
            if (
                size > MAX_CALL_BYTES
                or self._bytes + size > MAX_TOTAL_BYTES
                or len(self._recorded) >= MAX_RECORDED
            ):
                return None
            recorded = self._record(op, what, check, state, leaves)
            if recorded is None:
                return None
            self._recorded[key] = recorded
            self._seen.pop(key, None)
            self._bytes += size
        else:
            for buffer, value in zip(recorded.inputs, leaves.copied):
                buffer.copy_(value)
        recorded.graph.replay()
        return _copied_out(recorded.result)

    def _record(
        self,
        op: str,
        what: str,
        check: Callable[..., Measure],
        state: tuple,
        leaves: _Leaves,
    ) -> _Recorded | None:
        inputs = [torch.empty_like(t) for t in leaves.copied]
        for buffer, value in zip(inputs, leaves.copied):
            buffer.copy_(value)
        static = _substituted(state, {id(t): b for t, b in zip(leaves.copied, inputs)})
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
            self._stream = torch.cuda.Stream()
        graph = torch.cuda.CUDAGraph()
        current = torch.cuda.current_stream()
        self._stream.wait_stream(current)
        try:
            with torch.cuda.stream(self._stream):
                graph.capture_begin(pool=self._pool, capture_error_mode="thread_local")
                try:
                    result = check(*static)
                finally:
                    graph.capture_end()
        except Exception as exc:  # noqa: BLE001 - the checks then run eagerly, as before
            reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            self.failed = f"op '{op}' ({what}): {reason}"
            logger.warning(
                "vllm_fl verify: recording the check of op '%s' (%s) as a CUDA graph failed "
                "(%s); every check of this process runs eagerly from now on",
                op,
                what,
                reason,
            )
            return None
        finally:
            current.wait_stream(self._stream)
        return _Recorded(graph, inputs, result)

"""Replay the Triton launches another library's Python wrapper makes, without the wrapper.

vLLM's ``unified_attention`` derives some seventy kernel arguments in Python on every call and
launches through Triton's runner, which binds and specialises all of them again: in an eager
decode step, bound by the host, that is paid once per layer. For a given layout (shapes,
strides, dtypes, pointer alignment, the layer's constants) the wrapper makes the same launches
every time, with only the tensors changing. `record` runs the wrapper once with its kernels
watched, and returns a `Replay` that makes those launches again through the compiled kernels'
launchers (`launch.launcher_of`), with the new call's tensors put where the recorded call's
were.

A recording is only made where it is exact: every tensor a launch received must be one of the
call's named tensors (found by identity) or a buffer the caller keeps for the layout; every
other argument is a plain value the layout fixes. A kernel launched with a callable grid, one
that is not a plain ``triton.jit`` function, or a Triton release whose compiled-kernel calling
convention `launch` does not know, gives no replay. The caller checks the first replay against
the wrapper (`Replay` makes no claim the wrapper did not make).
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from vllm_fl.kernels import launch

_lock = threading.Lock()
_EMPTY = inspect.Parameter.empty  # Triton's parameters' "no default", as inspect's


@dataclass(frozen=True)
class Step:
    """One launch: the compiled kernel's launcher, its grid, every parameter's value in order,
    and (index, name) of the parameters that take the call's tensor ``name``."""

    launcher: Callable[..., None]
    grid: tuple[int, int, int]
    values: tuple[Any, ...]
    slots: tuple[tuple[int, str], ...]

    def __call__(self, tensors: Mapping[str, torch.Tensor]) -> None:
        values = list(self.values)
        for index, name in self.slots:
            values[index] = tensors[name]
        self.launcher(self.grid, *values)


@dataclass(frozen=True)
class Replay:
    """The launches a wrapper made for one layout, in order."""

    steps: tuple[Step, ...]

    def __call__(self, tensors: Mapping[str, torch.Tensor]) -> None:
        for step in self.steps:
            step(tensors)


class _Watched:
    """Stands in for a module's kernel while a call is recorded: ``kernel[grid](...)`` launches
    the real kernel as Triton's ``__getitem__`` does and keeps what it was given and the
    compiled kernel it ran."""

    def __init__(self, kernel: Any, log: list) -> None:
        self.kernel, self.log = kernel, log

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            compiled = self.kernel.run(*args, grid=grid, warmup=False, **kwargs)
            self.log.append((self.kernel, grid, args, kwargs, compiled))

        return run

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kernel, name)


def record(
    module: Any,
    kernel_names: Iterable[str],
    call: Callable[[], None],
    tensors: Mapping[str, torch.Tensor],
    kept: Iterable[torch.Tensor] = (),
) -> Replay | None:
    """Run ``call()`` (which launches ``module``'s kernels ``kernel_names`` through
    ``kernel[grid](...)``) with those kernels watched; the `Replay` of its launches, or None
    where they cannot be replayed exactly (module docstring). ``call`` runs either way.

    ``tensors``: the call's tensors by name, which a replay is given anew; ``kept``: buffers the
    caller keeps for this layout, which a replay passes as recorded."""
    log: list = []
    with _lock:
        originals = {name: getattr(module, name, None) for name in kernel_names}
        try:
            for name, kernel in originals.items():
                if kernel is not None:
                    setattr(module, name, _Watched(kernel, log))
            call()
        finally:
            for name, kernel in originals.items():
                if kernel is not None:
                    setattr(module, name, kernel)
    if not log or not launch.triton_supported():
        return None
    by_identity = {id(tensor): name for name, tensor in tensors.items() if tensor is not None}
    kept_ids = {id(tensor) for tensor in kept}
    steps = []
    for kernel, grid, args, kwargs, compiled in log:
        step = _step(kernel, grid, args, kwargs, compiled, by_identity, kept_ids)
        if step is None:
            return None
        steps.append(step)
    return Replay(tuple(steps))


def _step(kernel, grid, args, kwargs, compiled, by_identity, kept_ids) -> Step | None:
    params = getattr(kernel, "params", None)
    if compiled is None or params is None or callable(grid):
        return None
    values, slots = [], []
    for index, param in enumerate(params):
        if index < len(args):
            value = args[index]
        elif param.name in kwargs:
            value = kwargs[param.name]
        elif param.default is not _EMPTY:
            value = param.default
        else:
            return None
        if isinstance(value, torch.Tensor):
            name = by_identity.get(id(value))
            if name is not None:
                slots.append((index, name))
                value = None  # filled per call; the recorded call's tensor is not kept alive
            elif id(value) not in kept_ids:
                return None  # a tensor the wrapper made for this call: not replayable
        values.append(value)
    return Step(launch.launcher_of(compiled), launch.pad_grid(grid), tuple(values), tuple(slots))

"""Launch Triton kernels (FlagGems' and this library's own) with launch plans cached by input
layout.

In eager mode a decode step is bound by the host, and most of a FlagGems op's host time is its
Python wrappers, not the kernel: ``libentry`` rebuilds a specialisation key from every argument,
``pointwise_dynamic`` re-derives output dtypes, tile sizes and strides, autograd ``Function``
objects wrap inference calls (profile: ``benchmarks/profile_flagos.py``). The kernel itself is the
same for every call with the same input layout. A :class:`KernelPlans` launches a FlagGems kernel
once through FlagGems' own entry (which compiles, autotunes and specialises it), keeps the
compiled kernel and its constexpr values under a key the caller computes from the layout (shapes,
strides, dtypes, pointer alignment, device), and afterwards launches that compiled kernel
directly. Nothing in FlagGems is changed; only its kernels are reused.

A plan is only made where it is exact: kernels whose autotune configs have launch pre-hooks, and
Triton releases whose compiled-kernel calling convention this module does not know, always go
through FlagGems' entry.

A plan launches a compiled kernel as ``compiled[grid](*args)`` does. On Triton releases whose C
launcher this module knows (``_DIRECT_TRITON``), it calls that launcher itself: Triton's runner
looks up the current device and stream, builds launch metadata for the launch hooks and calls
an empty hook chain before and after every launch: Python that an eager decode step pays for
each of its launches. Where a hook is registered (a profiler), the kernel needs scratch memory,
or its launcher is wrapped (tensor descriptors), the runner launches it as before.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

MAX_PLANS = 1024  # per kernel; a workload with more distinct layouts starts over

_SUPPORTED_TRITON = ((3, 3), (3, 4), (3, 5), (3, 6))  # compiled[grid](*every_parameter)

# CudaLauncher.launch(grid x/y/z, stream, function, cooperative, pdl, global scratch, profile
# scratch, packed metadata, launch metadata, enter hook, exit hook, *every_parameter)
_DIRECT_TRITON = ((3, 6),)


def _triton_version() -> tuple[int, int]:
    import triton

    major, minor = (int(part) for part in triton.__version__.split(".")[:2])
    return major, minor


def triton_supported() -> bool:
    """Whether this Triton's compiled kernels take the call the launch plans make
    (``compiled[grid](*every_parameter)``); elsewhere kernels launch through Triton's runner."""
    return _triton_version() in _SUPPORTED_TRITON


def _direct_launch(compiled: Any) -> Callable[..., None] | None:
    """``launch(grid, *args)`` calling ``compiled``'s C launcher as Triton's runner does, for
    the current device; None where this Triton, this kernel or this torch does not allow it."""
    stream_of = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if stream_of is None or _triton_version() not in _DIRECT_TRITON:
        return None
    try:
        launcher = compiled.run  # loads the kernel's module where that has not happened yet
        c_launch = launcher.launch
        if (
            inspect.isfunction(c_launch)  # wrapped to build tensor descriptors per launch
            or launcher.global_scratch_size
            or launcher.profile_scratch_size
        ):
            return None
        function, metadata = compiled.function, compiled.packed_metadata
        cooperative, pdl = launcher.launch_cooperative_grid, launcher.launch_pdl
    except AttributeError:
        return None
    from triton import knobs

    runtime = knobs.runtime
    device = torch.cuda.current_device()

    def launch(grid: tuple[int, int, int], *args: Any) -> None:
        # a registered launch hook (a profiler) gets what Triton's runner gives it
        if getattr(runtime.launch_enter_hook, "calls", True) or getattr(
            runtime.launch_exit_hook, "calls", True
        ):
            compiled[grid](*args)
            return
        c_launch(
            grid[0],
            grid[1],
            grid[2],
            stream_of(device),
            function,
            cooperative,
            pdl,
            None,
            None,
            metadata,
            None,
            None,
            None,
            *args,
        )

    return launch


def launcher_of(compiled: Any) -> Callable[..., None]:
    """``launch(grid, *args)``, the same as ``compiled[grid](*args)`` for a three-dimensional
    grid: Triton's C launcher called directly where ``_direct_launch`` allows it."""
    direct = _direct_launch(compiled)
    if direct is not None:
        return direct

    def through_runner(grid: tuple[int, int, int], *args: Any) -> None:
        compiled[grid](*args)

    return through_runner


def _jit_function(kernel: Any) -> Any:
    """The ``triton.JITFunction`` under FlagGems' decorators (``libentry``, autotune, heuristics)."""
    import triton

    fn = kernel
    while not isinstance(fn, triton.runtime.JITFunction):
        fn = getattr(fn, "fn", None) or getattr(fn, "jit_function", None)
        if fn is None:
            raise TypeError(f"not a Triton kernel: {kernel!r}")
    return fn


def _has_pre_hooks(kernel: Any) -> bool:
    import triton

    fn = kernel
    while not isinstance(fn, triton.runtime.JITFunction) and fn is not None:
        if isinstance(fn, triton.runtime.Autotuner):
            if any(config.pre_hook is not None for config in fn.configs):
                return True
        fn = getattr(fn, "fn", None)
    return False


def cdiv(a: int, b: int) -> int:
    """ceil(a / b). Plain Python: ``triton.cdiv`` called from the host costs more host time."""
    return -(-a // b)


def next_pow2(n: int) -> int:
    """The smallest power of two that is at least ``n`` (1 for ``n`` <= 1); plain Python, as
    ``triton.next_power_of_2`` called from the host costs more host time."""
    return 1 << (n - 1).bit_length() if n > 1 else 1


def pad_grid(grid: Sequence[int]) -> tuple[int, int, int]:
    """A launch grid as the three dimensions a compiled kernel takes."""
    return (*grid, 1, 1)[:3]  # type: ignore[return-value]


@dataclass(frozen=True)
class Launch:
    """One kernel launch, ``kernel[grid](*args, **kwargs)``, and its plan key: ``layout`` holds
    everything the compiled kernel is specialised on."""

    grid: tuple[int, ...]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    layout: tuple


class KernelPlans:
    """Compiled launches of one Triton kernel (FlagGems' or this library's), by a
    caller-computed layout key.

    ``launch(key, grid, args, kwargs)`` behaves like ``kernel[grid](*args, **kwargs)``. The
    key must determine everything the compiled kernel was specialised on: dtypes, 16-byte
    alignment of every pointer, the value of every integer argument that is not in ``args``
    per call, and the device. ``args`` are the kernel's leading positional parameters;
    ``kwargs`` its remaining parameters and launch options (``num_warps``), which must be the
    same for every call with the same key.
    """

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self._params = _jit_function(kernel).params
        self._plannable = triton_supported() and not _has_pre_hooks(kernel)
        # layout -> (launcher_of(compiled kernel), parameters after the positional ones,
        # constexpr values)
        self._plans: dict[Hashable, tuple[Callable[..., None], tuple, dict[str, Any]]] = {}
        self._bound: dict[Hashable, tuple[Callable[..., Any], tuple]] = {}

    @property
    def parameter_names(self) -> tuple[str, ...]:
        """The kernel's parameter names, in order (constexprs included)."""
        return tuple(param.name for param in self._params)

    def launch(
        self,
        key: Hashable,
        grid: Sequence[int] | Callable[[dict[str, Any]], Sequence[int]],
        args: Sequence[Any],
        kwargs: dict[str, Any],
    ) -> None:
        """``grid`` is a tuple, or (for autotuned kernels) a function of the constexpr values."""
        plan = self._plans.get(key)
        if plan is not None:
            launcher, tail, constexprs = plan
            if callable(grid):
                grid = grid(constexprs)
            launcher(pad_grid(grid), *args, *tail)
            return
        compiled, constexprs = self._first_launch(grid, args, kwargs)
        if not self._plannable or compiled is None:
            return
        tail = self._tail(len(args), kwargs, constexprs)
        if tail is not None:
            if len(self._plans) >= MAX_PLANS:
                self._plans.clear()
            self._plans[key] = (launcher_of(compiled), tail, constexprs)

    def run(self, planned: Launch, signature: Hashable = None, dynamic: int = 0) -> None:
        """``launch`` of a :class:`Launch`. With a ``signature``, the launch is also bound to
        it for ``launch_bound``: the compiled kernel with its grid, and every argument after
        the first ``dynamic`` ones."""
        self.launch(planned.layout, planned.grid, planned.args, planned.kwargs)
        if signature is None or callable(planned.grid):
            return
        plan = self._plans.get(planned.layout)
        if plan is not None:
            launcher, tail, _constexprs = plan
            if len(self._bound) >= MAX_PLANS:
                self._bound.clear()
            fixed = (*planned.args[dynamic:], *tail)
            runner = functools.partial(launcher, pad_grid(planned.grid))
            self._bound[signature] = (runner, fixed)

    def launch_bound(self, signature: Hashable, dynamic_args: Sequence[Any]) -> bool:
        """Launch what ``run`` bound to ``signature``, with ``dynamic_args`` first (tensors, or
        their data pointers from ``pointers``); False, launching nothing, where nothing is bound
        to it.

        The per-call path of an eager op, where deriving the launch again (grid, strides,
        constexprs, plan key) would cost more host time than the launch itself. The caller's
        signature must determine everything ``run``'s launch derived from the call except the
        dynamic arguments themselves, whose alignment it checks per call."""
        bound = self._bound.get(signature)
        if bound is None:
            return False
        runner, fixed = bound
        runner(*dynamic_args, *fixed)
        return True

    def _first_launch(self, grid, args, kwargs) -> tuple[Any, dict[str, Any]]:
        """Launch through FlagGems' entry; returns the compiled kernel and constexpr values."""
        import triton

        kernel = self.kernel
        # As ``kernel[grid](*args, **kwargs)`` calls it.
        result = kernel.run(*args, grid=grid, warmup=False, **kwargs)
        if isinstance(kernel, triton.runtime.JITFunction):
            return result, {}
        if isinstance(kernel, triton.runtime.Autotuner):
            if isinstance(kernel.fn, triton.runtime.JITFunction) and kernel.best_config:
                return result, dict(kernel.best_config.kwargs)
            return None, {}
        if isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict):
            return result  # libentry: (compiled kernel, constexprs incl. tuned and defaults)
        return None, {}

    def _tail(self, n_args: int, kwargs, constexprs) -> tuple | None:
        """Values of the parameters after the positional ones, in signature order."""
        tail = []
        for param in self._params[n_args:]:
            if param.name in kwargs:
                tail.append(kwargs[param.name])
            elif param.name in constexprs:
                tail.append(constexprs[param.name])
            elif param.default is not inspect.Parameter.empty:
                tail.append(param.default)
            else:
                return None
        return tuple(tail)


_sinks: dict[torch.device, list[torch.Tensor]] = {}


def sink(numel: int, device: torch.device) -> torch.Tensor:
    """A float32 buffer of ``numel`` elements for a kernel output nobody reads (FlagGems'
    rms_norm also stores 1/rms per row). One buffer per device, grown as needed; outgrown
    buffers are kept, since a captured CUDA graph may still write into them."""
    buffers = _sinks.setdefault(device, [])
    if not buffers or buffers[-1].numel() < numel:
        size = max(numel, 2 * buffers[-1].numel() if buffers else 4096)
        buffers.append(torch.empty(size, dtype=torch.float32, device=device))
    return buffers[-1]


_current_cuda_device = getattr(torch._C, "_cuda_getDevice", None)  # CUDA builds only


def on_current_gpu(t: torch.Tensor) -> bool:
    """Whether ``t`` is on the current CUDA device, where the plans launch their kernels."""
    # A CUDA tensor means CUDA is initialised: torch's C getter, without the lazy-init checks
    # of torch.cuda.current_device(), which cost more than the rest of this per op call.
    return t.is_cuda and t.get_device() == _current_cuda_device()


def aligned(*tensors: torch.Tensor) -> bool:
    """Whether every tensor's data pointer is 16-byte aligned. Triton specialises kernels on
    it; plans are made for aligned operands only, the rare others go through FlagGems."""
    pointers = 0
    for t in tensors:
        pointers |= t.data_ptr()
    return not pointers & 15


def pointers(*tensors: torch.Tensor) -> list[int] | None:
    """The tensors' data pointers, the dynamic arguments of a bound launch
    (``KernelPlans.launch_bound``); None where one is not 16-byte aligned (see ``aligned``) or
    not on the first one's device.

    Triton's C launcher takes an integer pointer argument as it is. Given a tensor, it calls
    ``data_ptr()`` and then asks the CUDA driver whether that is a device pointer, for every
    tensor of every launch; the device check here stands in for the driver's."""
    device = tensors[0].get_device()
    found = []
    for t in tensors:
        pointer = t.data_ptr()
        if pointer & 15 or t.get_device() != device:
            return None
        found.append(pointer)
    return found


class PointwisePlans:
    """Launch plans of a FlagGems ``pointwise_dynamic`` function for same-shape, same-dtype
    floating-point tensors (and scalars), computing into a new tensor of that dtype.

    Mirrors the task partition of FlagGems' generated wrapper (FlagGems' own tile and warp
    heuristics): contiguous operands run as one flat task, others with their own strides. Any
    other call (broadcasting, mixed dtypes, integer inputs, an unknown FlagGems layout) goes
    through the function itself.
    """

    def __init__(self, function: Any) -> None:
        self.function = function
        schema = function.fx
        is_tensor = [schema.is_tensor(i) for i in range(schema.num_inputs())]
        self._tensor_positions = tuple(i for i, t in enumerate(is_tensor) if t)
        self._scalar_positions = tuple(i for i, t in enumerate(is_tensor) if not t)
        self._plans_by_rank: dict[int, KernelPlans] = {}
        self._partitions: dict[Hashable, tuple] = {}
        self._usable = schema.num_output_tensors() == 1 and self._config_known(function)

    @staticmethod
    def _config_known(function: Any) -> bool:
        config = getattr(function, "config", None)
        return (
            config is not None
            and not getattr(config, "prefer_1d_tile", True)
            and hasattr(function, "instantiate")
            and hasattr(function, "_compute_kernel_names")
        )

    def __call__(self, *inputs: Any) -> torch.Tensor:
        tensors = [inputs[i] for i in self._tensor_positions]
        first = tensors[0]
        if not self._usable or not first.dtype.is_floating_point or not on_current_gpu(first):
            return self.function(*inputs)
        shape, dtype = first.shape, first.dtype
        pointers = 0
        for t in tensors:
            if t.shape != shape or t.dtype != dtype:
                return self.function(*inputs)
            pointers |= t.data_ptr()
        if pointers & 15:  # a misaligned operand: FlagGems' own path specialises for it
            return self.function(*inputs)
        out = torch.empty(shape, dtype=dtype, device=first.device)
        if out.numel() == 0:
            return out
        contiguous = all(t.is_contiguous() for t in tensors)
        layout = (
            None if contiguous else tuple(t.stride() for t in tensors),
            shape,
            dtype,
            first.device.index,
            tuple(inputs[i] for i in self._scalar_positions),
        )
        partition = self._partitions.get(layout)
        if partition is None:
            partition = self._partition(tensors, out, contiguous)
            if len(self._partitions) >= MAX_PLANS:
                self._partitions.clear()
            self._partitions[layout] = partition
        plans, grid, tail, kwargs = partition
        plans.launch(layout, grid, (*inputs, out, *tail), kwargs)
        return out

    def _partition(self, tensors, out, contiguous: bool) -> tuple:
        """The generated wrapper's launch parameters for this layout (FlagGems' heuristics)."""
        from flag_gems.utils.shape_utils import (
            heuristics_for_num_warps,
            heuristics_for_tile_size,
            stride_order,
        )

        config = self.function.config
        if contiguous:
            shape, strides = (out.numel(),), [(1,)] * (len(tensors) + 1)
        else:
            shape = tuple(out.shape)
            strides = [t.stride() for t in tensors] + [out.stride()]
        ndim = len(shape)
        num_tasks = out.numel()
        tile_sizes = heuristics_for_tile_size(config.max_tile_size, *shape)
        tile_size = 1
        for size in tile_sizes:
            tile_size *= size
        num_tiles = 1
        for size, tile in zip(shape, tile_sizes):
            num_tiles *= cdiv(size, tile)
        num_ctas = min(config.max_grid_size[0], num_tiles)
        tiles_per_cta = cdiv(num_tiles, num_ctas)
        tail: list[Any] = []
        for tensor_strides in strides:
            tail.extend(tensor_strides)
            if config.prefer_block_pointer:
                tail.extend(stride_order(tensor_strides) if ndim >= 2 else (0,))
        tail.extend(shape)
        tail.append(num_tasks)
        kwargs: dict[str, Any] = {"tiles_per_cta": tiles_per_cta}
        kwargs.update({f"tile_size{i}": tile for i, tile in enumerate(tile_sizes)})
        kwargs["one_tile_per_cta"] = tiles_per_cta == 1
        kwargs["num_warps"] = heuristics_for_num_warps(tile_size)
        return self._kernel_plans(ndim), (num_ctas, 1, 1), tuple(tail), kwargs

    def _kernel_plans(self, ndim: int) -> KernelPlans:
        plans = self._plans_by_rank.get(ndim)
        if plans is None:
            wrapper = self.function.instantiate(ndim)
            kernel_name = self.function._compute_kernel_names(ndim)[0]
            plans = KernelPlans(wrapper.__globals__[kernel_name])
            self._plans_by_rank[ndim] = plans
        return plans


def defining_module(public: str) -> Any | None:
    """The module that defines ``flag_gems.<public>`` in this FlagGems (``public`` a dotted path
    below ``flag_gems``, e.g. ``fused.fused_experts_impl``), which may be a vendor override of
    the generic one; None where FlagGems has no such function."""
    import importlib
    import sys

    owner, _, name = f"flag_gems.{public}".rpartition(".")
    function = getattr(importlib.import_module(owner), name, None)
    return sys.modules.get(getattr(function, "__module__", None) or "")


def kernel_of(public: str, kernel: str) -> Any | None:
    """The kernel ``kernel`` of ``defining_module(public)``, or None where it has no such kernel."""
    return getattr(defining_module(public), kernel, None)


@functools.cache
def plans_of(public: str, kernel: str) -> KernelPlans | None:
    """Launch plans of ``kernel_of(public, kernel)``, one table per process; None where this
    FlagGems has no such kernel."""
    found = kernel_of(public, kernel)
    return None if found is None else KernelPlans(found)


@functools.cache
def plans_for(kernel: Any) -> KernelPlans:
    """Launch plans of one of this library's own Triton kernels, one table per kernel and
    process (the kernel modules import Triton: callers import them on first use)."""
    return KernelPlans(kernel)

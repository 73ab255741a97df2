"""Launch plans without a GPU: the entry's launches (FlagGems' or Triton's, which compile) and
the compiled kernel's launches are recorded instead of run."""

from __future__ import annotations

from typing import Any


class RecordingCompiled:
    """A compiled kernel that records its launches as (grid, arguments)."""

    def __init__(self) -> None:
        self.launches: list[tuple[tuple, tuple]] = []

    def __getitem__(self, grid):
        return lambda *args: self.launches.append((grid, args))


def recorded_plans(kernel: Any, constexprs: dict[str, Any] | None = None):
    """(plans, compiled, entry): ``KernelPlans`` of ``kernel`` whose first launch per layout is
    appended to ``entry`` as (grid, args, kwargs) and reports ``constexprs`` as the entry's
    values, and whose later launches go to ``compiled``."""
    from vllm_fl.kernels import launch

    plans = launch.KernelPlans(kernel)
    plans._plannable = True  # the calling convention of this Triton release is not the point
    compiled, entry = RecordingCompiled(), []

    def first_launch(grid, args, kwargs):
        entry.append((grid, args, kwargs))
        return compiled, dict(constexprs or {})

    plans._first_launch = first_launch
    return plans, compiled, entry

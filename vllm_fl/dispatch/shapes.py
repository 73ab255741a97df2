"""Shape checks of the arguments an op receives: a scale or group size of the wrong shape is a
clear error naming the op, the argument, its shape and the expected one, never silent garbage."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def check_shape(
    op: str,
    arg: str,
    tensor: torch.Tensor,
    expected: Sequence[int | None],
    *,
    numel: bool = False,
) -> None:
    """Raise ValueError unless `tensor` has the shape `expected` (None: any size there).

    With `numel`, a tensor of a single element (a per-tensor scale, shape [], [1] or [1, 1]) is
    accepted too, as vLLM's kernels broadcast it.
    """
    if numel and tensor.numel() == 1:
        return
    shape = tuple(tensor.shape)
    ok = len(shape) == len(expected) and all(
        want is None or got == want for got, want in zip(shape, expected)
    )
    if not ok:
        want = "[" + ", ".join("*" if w is None else str(w) for w in expected) + "]"
        also = " (or a single element)" if numel else ""
        raise ValueError(f"{op}: argument {arg!r} has shape {list(shape)}, expected {want}{also}")

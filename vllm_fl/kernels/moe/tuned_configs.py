"""Tuned configs of FlagGems' ``fused_moe_kernel``, per device and experts' shape.

FlagGems looks its fused-MoE configs up in a table it ships per device (5.0.2 ships one for
Ascend only) and elsewhere takes a default heuristic: on an H100, at a 128-token decode of
Qwen3-30B-A3B's experts, that heuristic picks 16-row blocks where the best config is several
percent faster. This module holds this library's own tables (package data), measured on the
device by ``python -m vllm_fl.kernels.moe.tune``, one JSON file per device, experts' shape and
dtype in ``tuned/``::

    E=<experts>,N=<intermediate>,device_name=<device>,dtype=<dtype>.json

mapping a token count to a config (FlagGems' and vLLM's format). A call takes the config of
the nearest tuned token count; where no table matches, FlagGems' own lookup decides. A table
that does not parse is reported once, in a warning naming the file, and not used.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from vllm_fl.kernels.tuned import (  # noqa: F401  (this module's API since before tuned.py)
    CONFIG_KEYS,
    TableError,
    device_name,
    nearest,
    parse_table,
    read_table,
    table_device,
)

TABLE_DIR = Path(__file__).with_name("tuned")


def table_name(experts: int, intermediate: int, device: str, dtype: torch.dtype) -> str:
    """The file name of the table for ``experts`` experts of ``intermediate`` columns (w2's last
    dimension) in ``dtype`` on ``device``."""
    dtype_name = str(dtype).removeprefix("torch.")
    return f"E={experts},N={intermediate},device_name={device},dtype={dtype_name}.json"


@functools.cache
def load_table(name: str) -> dict[int, dict[str, int]] | None:
    """The table in ``TABLE_DIR`` called ``name``; None where there is none or it is invalid
    (then with a warning)."""
    return read_table(TABLE_DIR / name, "MoE")


def config_for(
    experts: int, intermediate: int, device: str, dtype: torch.dtype, tokens: int
) -> dict | None:
    """The tuned config for ``tokens`` tokens through ``experts`` experts of ``intermediate``
    columns in ``dtype`` on the device called ``device``; None where there is no table."""
    table = load_table(table_name(experts, intermediate, device, dtype))
    return None if table is None else dict(nearest(table, tokens))


def lookup(w1: torch.Tensor, w2: torch.Tensor, dtype: torch.dtype, tokens: int) -> dict | None:
    """``config_for`` the experts ``w1`` (E, 2N, K) and ``w2`` (E, K, N) on their GPU; None for
    tensors not on a CUDA device."""
    if w1.device.type != "cuda":
        return None
    return config_for(w2.size(0), w2.size(2), device_name(w1.device), dtype, tokens)

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
import json
import logging
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

TABLE_DIR = Path(__file__).with_name("tuned")
#: a config's keys: the kernel's tile constexprs and its launch options
CONFIG_KEYS = (
    "BLOCK_SIZE_M",
    "BLOCK_SIZE_N",
    "BLOCK_SIZE_K",
    "GROUP_SIZE_M",
    "num_warps",
    "num_stages",
)
_POWERS_OF_TWO = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "num_warps")


class TableError(ValueError):
    """A table file that is not a tuned-config table; the message names the file and key."""


def table_device(name: str) -> str:
    """A device name as the table files spell it (spaces as underscores, as vLLM's)."""
    return name.replace(" ", "_")


def device_name(device: torch.device) -> str:
    """The name of ``device`` as the table files spell it."""
    return table_device(torch.cuda.get_device_name(device))


def table_name(experts: int, intermediate: int, device: str, dtype: torch.dtype) -> str:
    """The file name of the table for ``experts`` experts of ``intermediate`` columns (w2's last
    dimension) in ``dtype`` on ``device``."""
    dtype_name = str(dtype).removeprefix("torch.")
    return f"E={experts},N={intermediate},device_name={device},dtype={dtype_name}.json"


def parse_table(path: Path, text: str) -> dict[int, dict[str, int]]:
    """A table's token count -> config; TableError naming ``path``, the key and the bad value
    where ``text`` is not one."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise TableError(f"{path}:{error.lineno}: not JSON: {error.msg}") from None
    if not isinstance(data, dict) or not data:
        raise TableError(f"{path}: expected an object of token count -> config")
    table: dict[int, dict[str, int]] = {}
    for count, config in data.items():
        if not (count.isascii() and count.isdigit()) or int(count) < 1:
            raise TableError(f"{path}: key {count!r} is not a token count (a positive integer)")
        if not isinstance(config, dict) or sorted(config) != sorted(CONFIG_KEYS):
            got = sorted(config) if isinstance(config, dict) else type(config).__name__
            raise TableError(
                f"{path}: [{count}] has {got}; a config has exactly {list(CONFIG_KEYS)}"
            )
        for key, value in config.items():
            if type(value) is not int or value < 1:
                raise TableError(f"{path}: [{count}].{key} = {value!r}; must be a positive integer")
            if key in _POWERS_OF_TWO and value & (value - 1):
                raise TableError(f"{path}: [{count}].{key} = {value}; must be a power of two")
        table[int(count)] = dict(config)
    return table


@functools.cache
def load_table(name: str) -> dict[int, dict[str, int]] | None:
    """The table in ``TABLE_DIR`` called ``name``; None where there is none or it is invalid
    (then with a warning)."""
    path = TABLE_DIR / name
    if not path.is_file():
        return None
    try:
        return parse_table(path, path.read_text(encoding="utf-8"))
    except TableError as error:
        logger.warning("ignoring the tuned MoE configs: %s", error)
    except (OSError, UnicodeDecodeError) as error:
        logger.warning("ignoring the tuned MoE configs: %s: unreadable: %s", path, error)
    return None


def nearest(table: dict[int, dict[str, int]], tokens: int) -> dict[str, int]:
    """The config tuned for the token count nearest ``tokens`` (the smaller on a tie)."""
    return table[min(table, key=lambda count: (abs(count - tokens), count))]


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

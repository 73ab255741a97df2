"""Tuned-config tables of the library's kernels: one JSON file per device and shape, a size (the
GEMMs' token count, the attention's decode batch) -> a config. The GEMMs' configs are Triton
configs (the kernel's tile constexprs and launch options, in FlagGems' and vLLM's format); a
``Schema`` names another table's keys. A call takes the config of the nearest tuned size. A table
that does not parse is reported once, in a warning naming the file, and not used."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

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


@dataclass(frozen=True)
class Schema:
    """What a table's configs hold: exactly ``keys``, positive integers, the ``powers_of_two``
    among them powers of two; ``size`` names what the table's keys count."""

    keys: tuple[str, ...]
    powers_of_two: tuple[str, ...]
    size: str = "token count"


GEMM = Schema(CONFIG_KEYS, _POWERS_OF_TWO)


class TableError(ValueError):
    """A table file that is not a tuned-config table; the message names the file and key."""


def table_device(name: str) -> str:
    """A device name as the table files spell it (spaces as underscores, as vLLM's)."""
    return name.replace(" ", "_")


def device_name(device: torch.device) -> str:
    """The name of ``device`` as the table files spell it."""
    return table_device(torch.cuda.get_device_name(device))


def parse_table(path: Path, text: str, schema: Schema = GEMM) -> dict[int, dict[str, int]]:
    """A table's size -> config; TableError naming ``path``, the key and the bad value where
    ``text`` is not one."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise TableError(f"{path}:{error.lineno}: not JSON: {error.msg}") from None
    if not isinstance(data, dict) or not data:
        raise TableError(f"{path}: expected an object of {schema.size} -> config")
    table: dict[int, dict[str, int]] = {}
    for count, config in data.items():
        if not (count.isascii() and count.isdigit()) or int(count) < 1:
            raise TableError(f"{path}: key {count!r} is not a {schema.size} (a positive integer)")
        if not isinstance(config, dict) or sorted(config) != sorted(schema.keys):
            got = sorted(config) if isinstance(config, dict) else type(config).__name__
            raise TableError(
                f"{path}: [{count}] has {got}; a config has exactly {list(schema.keys)}"
            )
        for key, value in config.items():
            if type(value) is not int or value < 1:
                raise TableError(f"{path}: [{count}].{key} = {value!r}; must be a positive integer")
            if key in schema.powers_of_two and value & (value - 1):
                raise TableError(f"{path}: [{count}].{key} = {value}; must be a power of two")
        table[int(count)] = dict(config)
    return table


def read_table(path: Path, what: str, schema: Schema = GEMM) -> dict[int, dict[str, int]] | None:
    """The table at ``path``; None where there is none or it is invalid (then with a warning
    naming ``what`` it tunes)."""
    if not path.is_file():
        return None
    try:
        return parse_table(path, path.read_text(encoding="utf-8"), schema)
    except TableError as error:
        logger.warning("ignoring the tuned %s configs: %s", what, error)
    except (OSError, UnicodeDecodeError) as error:
        logger.warning("ignoring the tuned %s configs: %s: unreadable: %s", what, path, error)
    return None


def nearest(table: dict[int, dict[str, int]], tokens: int) -> dict[str, int]:
    """The config tuned for the size nearest ``tokens`` (the smaller on a tie)."""
    return table[min(table, key=lambda count: (abs(count - tokens), count))]


def table_json(table: dict[int, dict], schema: Schema = GEMM) -> str:
    """A table as its file holds it: sizes ascending, keys in the schema's order."""
    return (
        json.dumps(
            {
                str(tokens): {key: table[tokens][key] for key in schema.keys}
                for tokens in sorted(table)
            },
            indent=4,
        )
        + "\n"
    )


def write_table(path: Path, table: dict[int, dict], schema: Schema = GEMM) -> None:
    """Write ``table`` to ``path`` as its file holds it (``table_json``), checked first by the
    parser that loads it, so what is written is what loads."""
    text = table_json(table, schema)
    parse_table(path, text, schema)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)

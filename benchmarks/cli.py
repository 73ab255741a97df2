"""What the benchmarks' command lines share: argument types, name checks, result files, and the
sizes a kernel sweep runs at."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from pathlib import Path

#: token counts of the kernel sweep: decode batches up to DECODE_MAX_TOKENS, prefill beyond
TOKENS = (1, 8, 64, 256, 2048, 8192, 32768)
DECODE_MAX_TOKENS = 256
DTYPES = ("bfloat16", "float16")


def int_list(text: str) -> list[int]:
    """argparse type: "1,64,2048" -> [1, 64, 2048], each a positive integer."""
    values = []
    for part in text.split(","):
        try:
            value = int(part)
        except ValueError:
            value = 0
        if value <= 0:
            raise argparse.ArgumentTypeError(
                f"{part.strip()!r} in {text!r} is not a positive integer; expected a "
                "comma-separated list such as 1,64,2048"
            )
        values.append(value)
    return values


def name_list(text: str) -> list[str]:
    """argparse type: "a,b" -> ["a", "b"] (empty items refused)."""
    names = [part.strip() for part in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"{text!r} has an empty item; expected a,b,...")
    return names


def refuse_unknown(parser: argparse.ArgumentParser, flag: str, given, allowed: Iterable) -> None:
    """``parser.error`` naming the values of ``flag`` that ``allowed`` does not hold."""
    allowed = list(allowed)
    unknown = [name for name in given if name not in allowed]
    if unknown:
        parser.error(f"{flag}: unknown {', '.join(unknown)}; allowed: {', '.join(allowed)}")


def write_json(path: Path, data: object) -> None:
    """Write a result file (parent folders created), one key per line at the top levels."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")


def read_json(path: Path) -> object:
    return json.loads(Path(path).read_text())

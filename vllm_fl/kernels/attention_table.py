"""How vLLM's Triton ``unified_attention`` runs a batch of decodes: the tuned table per device.

vLLM's kernel runs a batch of decodes one of two ways: its 2D kernel (one program per sequence
and kv head), or its 3D kernel, which splits every sequence's keys into segments and reduces them
afterwards; more segments fill the GPU at small batches and cost a reduction. vLLM's own rule
takes the 3D kernel with 16 segments while the 2D grid has fewer than 128 programs (``vllm_rule``).
A tuned table (``attention_tuned/``, one JSON file per device, attention shape and dtype, written
by ``python -m benchmarks.tune_attention --write``) replaces that rule with what measured fastest
there: a decode batch size -> ``{"segments": S}``, S = 1 for the 2D kernel. A batch takes the
entry of the nearest tuned size (the smaller on a tie); batches above the largest tuned size take
the 2D kernel. Where there is no table, vLLM's rule applies.

The 3D kernel's float32 scratch holds ``sequences x segments`` rows of every head; its capacity
is the most any batch of the table (or of vLLM's rule) needs, so one allocation serves them all.
"""

from __future__ import annotations

import functools
from pathlib import Path

from vllm_fl.kernels import tuned

TABLE_DIR = Path(__file__).with_name("attention_tuned")
SCHEMA = tuned.Schema(keys=("segments",), powers_of_two=("segments",), size="decode batch size")
#: vLLM's Triton backend: key segments per sequence of the 3D kernel, and the launch grid the 2D
#: kernel must fill before the 3D one stops paying off (num_kv_heads programs per sequence)
SEGMENTS = 16
MIN_GRID_2D = 128
#: the 2D kernel, as a table entry's segment count
TWO_D = 1

Table = dict[int, dict[str, int]]


def table_name(heads: int, kv_heads: int, head_size: int, device: str, dtype: str) -> str:
    """The file name of the table for an attention shape on ``device`` (as ``tuned`` spells
    device names) in ``dtype`` (``bfloat16``, ``float16``)."""
    return (
        f"heads={heads},kv_heads={kv_heads},head_size={head_size},"
        f"device_name={device},dtype={dtype}.json"
    )


@functools.cache
def load_table(name: str) -> Table | None:
    """The table in ``TABLE_DIR`` called ``name``; None where there is none or it is invalid."""
    return tuned.read_table(TABLE_DIR / name, "paged-attention decode", SCHEMA)


def _vllm_threshold(kv_heads: int) -> int:
    """The most sequences vLLM's rule runs in the 3D kernel."""
    return max(1, MIN_GRID_2D // kv_heads)


def vllm_rule(seqs: int, kv_heads: int) -> int:
    """vLLM's choice for ``seqs`` decodes: ``SEGMENTS`` segments while the 2D kernel's grid
    (``seqs x kv_heads`` programs) stays under ``MIN_GRID_2D``, else the 2D kernel."""
    return SEGMENTS if seqs <= _vllm_threshold(kv_heads) else TWO_D


def segments_for(table: Table | None, seqs: int, kv_heads: int) -> int:
    """The segment count a batch of ``seqs`` decodes runs with (``TWO_D``: the 2D kernel)."""
    if table is None:
        return vllm_rule(seqs, kv_heads)
    if seqs > max(table):
        return TWO_D
    return tuned.nearest(table, seqs)["segments"]


def scratch_rows(table: Table | None, kv_heads: int) -> int:
    """The most ``sequences x segments`` any batch taking the 3D kernel needs."""
    largest = max(table) if table is not None else _vllm_threshold(kv_heads)
    segments = ((seqs, segments_for(table, seqs, kv_heads)) for seqs in range(1, largest + 1))
    return max((seqs * s for seqs, s in segments if s != TWO_D), default=0)

"""Paged attention, kernel by kernel (needs a CUDA device).

Times the candidate kernels of the op ``paged_attention`` on a model's attention shape (vLLM's
paged cache [num_blocks, 16, kv_heads, head_size] in bfloat16, the key and value halves of one
[num_blocks, 2, ...] tensor as vLLM 0.24 allocates it, a random block table per sequence) at decode and prefill batches: the portable kernels the flagos impl can run (vLLM's
Triton ``unified_attention`` as ``vllm_fl.kernels.attention`` calls it, the same kernel with
other launch settings, FlagGems' ``flash_attn_varlen_func``) against FlashAttention-3, what
vanilla vLLM runs on an H100. Each kernel alone in a CUDA graph (CUDA events over many calls
where it cannot be captured; the row says so), µs per call.

    python -m benchmarks.bench_attention --json benchmarks/results/h100_attention_kernels.json
    python -m benchmarks.bench_attention --models llama3-8b --shapes decode-b32-c2048 \\
        --candidates flagos,triton-3d-s32,fa3

Shapes: ``decode-bB-cC``, B sequences of context C (their last token the one query);
``prefill-N``, one sequence of N new tokens without context (a long prompt, the kernel's
largest single launch); ``prefill-8x512``, eight such sequences of 512 (a batch of short
prompts, what the scheduler packs into 4096 tokens more often). Every query attends causally.

Each kernel's output is checked once per shape against the reference impl of
``paged_attention`` (float32): a max abs error over `TOLERANCE` makes an error row, so a fast
wrong kernel cannot win. A kernel that cannot run a shape, or that the installed libraries lack,
gets its error in the row instead of a time.
"""

from __future__ import annotations

import argparse
import sys
from importlib import metadata
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.cli import name_list, refuse_unknown, write_json
from benchmarks.tables import Column, text_table

if TYPE_CHECKING:
    import torch

BLOCK_SIZE = 16  # vLLM's default KV-cache block size on CUDA
#: largest max abs error against the reference a timed kernel may have (bfloat16 outputs)
TOLERANCE = 0.05
#: the candidate the ratios are taken to
BASELINE = "fa3"


@dataclass(frozen=True)
class Model:
    """A model's attention layer: query heads, kv heads, head size."""

    name: str
    heads: int
    kv_heads: int
    head_size: int


@dataclass(frozen=True)
class Shape:
    """A batch of `seqs` sequences of `seq_len` tokens, each with its last `query_len` tokens
    as queries."""

    name: str
    phase: str  # "decode" or "prefill"
    seqs: int
    query_len: int
    seq_len: int


@dataclass(frozen=True)
class Candidate:
    """A kernel (a key of `KERNELS`) with its launch settings: a variant is data."""

    name: str
    kernel: str
    kwargs: dict = field(default_factory=dict)
    phases: tuple[str, ...] = ("decode", "prefill")


MODELS = (Model("llama3-8b", 32, 8, 128), Model("qwen3-30b-a3b", 32, 4, 128))

SHAPES = tuple(
    Shape(f"decode-b{seqs}-c{context}", "decode", seqs, 1, context)
    for seqs in (1, 32, 256)
    for context in (512, 2048)
) + (
    Shape("prefill-512", "prefill", 1, 512, 512),
    Shape("prefill-4096", "prefill", 1, 4096, 4096),
    Shape("prefill-8x512", "prefill", 8, 512, 512),
)

#: segment counts of the forced 3D launches (flagos: the device's tuned table, or vLLM's 16)
SEGMENT_COUNTS = (8, 16, 32, 64)

CANDIDATES = (
    # what the flagos impl runs: vllm_fl.kernels.attention.paged_attention's choice per batch
    Candidate("flagos", "flagos"),
    # vLLM's kernel as that module launches it (the device's tuned table, or vLLM's rule)
    Candidate("vllm-triton", "plugin_triton"),
    # vLLM's kernel, decode launch forced: the 2D kernel, or the 3D one with n segments
    Candidate("triton-2d", "vllm_triton", {"segments": None}, ("decode",)),
    *(
        Candidate(f"triton-3d-s{n}", "vllm_triton", {"segments": n}, ("decode",))
        for n in SEGMENT_COUNTS
    ),
    Candidate("flaggems-varlen", "flaggems", {"function": "flash_attn_varlen_func"}),
    Candidate("flaggems-varlen-opt", "flaggems", {"function": "flash_attn_varlen_opt_func"}),
    # FA3 as the cuda impl calls it (no scheduler metadata: FA3's own split heuristics) ...
    Candidate(BASELINE, "fa3"),
    # ... and as vanilla vLLM's full CUDA graphs decode: ahead-of-time scheduler metadata, at
    # most 32 splits (AttentionConfig.flash_attn_max_num_splits_for_cuda_graph)
    Candidate("fa3-aot-s32", "fa3", {"aot_splits": 32}, ("decode",)),
)


@dataclass
class Row:
    """One candidate on one shape: µs per call (None with an error), its max abs error against
    the reference, and how it was timed ("graph", or "events" with `note` saying why)."""

    model: str
    shape: str
    candidate: str
    us: float | None
    max_abs_err: float | None = None
    timing: str | None = None
    note: str | None = None
    error: str | None = None


# -- inputs -----------------------------------------------------------------------------------


@dataclass
class Inputs:
    """The arguments of ``paged_attention`` for one model and shape, on the GPU."""

    model: Model
    shape: Shape
    query: torch.Tensor
    key_cache: torch.Tensor
    value_cache: torch.Tensor
    block_table: torch.Tensor
    seq_lens: torch.Tensor
    query_start_loc: torch.Tensor

    @property
    def scale(self) -> float:
        return self.model.head_size**-0.5


def make_inputs(model: Model, shape: Shape, seed: int = 0, device: str = "cuda") -> Inputs:
    """Random queries and caches; every sequence's blocks drawn at random from the cache."""
    import torch

    gen = torch.Generator(device).manual_seed(seed)
    blocks_per_seq = -(-shape.seq_len // BLOCK_SIZE)
    num_blocks = shape.seqs * blocks_per_seq
    # as vLLM 0.24 lays its cache out: a block's keys, then its values
    cache = (num_blocks, 2, BLOCK_SIZE, model.kv_heads, model.head_size)
    tokens = shape.seqs * shape.query_len

    def randn(size):
        return torch.randn(size, generator=gen, device=device, dtype=torch.bfloat16)

    table = torch.randperm(num_blocks, generator=gen, device=device, dtype=torch.int32)
    key_cache, value_cache = randn(cache).unbind(1)
    return Inputs(
        model,
        shape,
        query=randn((tokens, model.heads, model.head_size)),
        key_cache=key_cache,
        value_cache=value_cache,
        block_table=table.view(shape.seqs, blocks_per_seq),
        seq_lens=torch.full((shape.seqs,), shape.seq_len, dtype=torch.int32, device=device),
        query_start_loc=torch.arange(
            0, tokens + 1, shape.query_len, dtype=torch.int32, device=device
        ),
    )


# -- kernels: each returns a zero-argument callable writing the attention into `out` ------------


def flagos_kernel(x: Inputs, out: torch.Tensor) -> Callable[[], None]:
    """The flagos impl's kernel choice for the batch (``kernels.attention.paged_attention``)."""
    from vllm_fl.kernels.attention import paged_attention

    return _plugin_call(paged_attention, x, out)


def plugin_triton_kernel(x: Inputs, out: torch.Tensor) -> Callable[[], None]:
    """vLLM's ``unified_attention`` as ``vllm_fl.kernels.attention`` launches it."""
    from vllm_fl.kernels.attention import unified_attention

    return _plugin_call(unified_attention, x, out)


def _plugin_call(kernel: Callable, x: Inputs, out: torch.Tensor) -> Callable[[], None]:
    s = x.shape
    args = (x.query, x.key_cache, x.value_cache, out, x.block_table, x.seq_lens)
    return lambda: kernel(
        *args, x.query_start_loc, s.query_len, s.seq_len, x.scale, True, -1, 0.0, None
    )


def vllm_triton_kernel(x: Inputs, out: torch.Tensor, segments: int | None) -> Callable[[], None]:
    """vLLM's ``unified_attention``: the 2D kernel (`segments` None), or for a batch of decodes
    the 3D one splitting every sequence's keys into `segments` segments."""
    import torch
    from vllm.v1.attention.ops.triton_unified_attention import unified_attention

    def scratch(*size: int) -> torch.Tensor:
        return torch.empty(size, dtype=torch.float32, device=x.query.device)

    decode = {}
    if segments is not None:
        stats = (x.shape.seqs * x.shape.query_len, x.model.heads, segments)
        decode = {
            "seq_threshold_3D": x.shape.seqs,
            "num_par_softmax_segments": segments,
            # the head's values padded to a power of two, as vLLM's Triton backend allocates them
            "softmax_segm_output": scratch(*stats, 1 << (x.model.head_size - 1).bit_length()),
            "softmax_segm_max": scratch(*stats),
            "softmax_segm_expsum": scratch(*stats),
        }
    return lambda: unified_attention(
        q=x.query,
        k=x.key_cache,
        v=x.value_cache,
        out=out,
        cu_seqlens_q=x.query_start_loc,
        max_seqlen_q=x.shape.query_len,
        seqused_k=x.seq_lens,
        max_seqlen_k=x.shape.seq_len,
        softmax_scale=x.scale,
        causal=True,
        window_size=(-1, -1),
        block_table=x.block_table,
        softcap=0.0,
        q_descale=None,
        k_descale=None,
        v_descale=None,
        **decode,
    )


def flaggems_kernel(x: Inputs, out: torch.Tensor, function: str) -> Callable[[], None]:
    """FlagGems' FlashAttention-2 in Triton (`function` of ``flag_gems``), paged through the
    block table spread to the cache's page spacing as the flagos impl spreads it, key lengths
    from ``seqused_k``."""
    import flag_gems

    from vllm_fl.kernels.attention import flash_attn_pages

    attend = getattr(flag_gems, function)
    pages = flash_attn_pages(x.key_cache, x.value_cache, x.block_table)
    return lambda: attend(
        q=x.query,
        k=x.key_cache,
        v=x.value_cache,
        max_seqlen_q=x.shape.query_len,
        cu_seqlens_q=x.query_start_loc,
        max_seqlen_k=x.shape.seq_len,
        seqused_k=x.seq_lens,
        softmax_scale=x.scale,
        causal=True,
        block_table=pages,
        out=out,
    )


def fa3_kernel(x: Inputs, out: torch.Tensor, aot_splits: int | None = None) -> Callable[[], None]:
    """vLLM's FlashAttention-3; with `aot_splits` the scheduler metadata computed ahead of time
    for at most that many splits, as vLLM's FlashAttention backend does for its CUDA graphs."""
    from vllm.vllm_flash_attn import flash_attn_varlen_func, get_scheduler_metadata

    s, m = x.shape, x.model
    schedule = {}
    if aot_splits is not None:
        metadata = get_scheduler_metadata(
            batch_size=s.seqs,
            max_seqlen_q=s.query_len,
            max_seqlen_k=s.seq_len,
            num_heads_q=m.heads,
            num_heads_kv=m.kv_heads,
            headdim=m.head_size,
            cache_seqlens=x.seq_lens,
            qkv_dtype=x.query.dtype,
            cu_seqlens_q=x.query_start_loc,
            page_size=BLOCK_SIZE,
            causal=True,
            num_splits=aot_splits,
        )
        schedule = {"scheduler_metadata": metadata, "num_splits": aot_splits}
    return lambda: flash_attn_varlen_func(
        q=x.query,
        k=x.key_cache,
        v=x.value_cache,
        out=out,
        cu_seqlens_q=x.query_start_loc,
        max_seqlen_q=s.query_len,
        seqused_k=x.seq_lens,
        max_seqlen_k=s.seq_len,
        softmax_scale=x.scale,
        causal=True,
        block_table=x.block_table,
        fa_version=3,
        **schedule,
    )


KERNELS: dict[str, Callable[..., Callable[[], None]]] = {
    "flagos": flagos_kernel,
    "vllm_triton": vllm_triton_kernel,
    "plugin_triton": plugin_triton_kernel,
    "flaggems": flaggems_kernel,
    "fa3": fa3_kernel,
}


# -- measuring --------------------------------------------------------------------------------


def reference_output(x: Inputs) -> torch.Tensor:
    """The reference impl of ``paged_attention`` (float32 softmax) on `x`."""
    import torch

    from vllm_fl.backends.reference.impl.attention import paged_attention

    out = torch.empty_like(x.query)
    s = x.shape
    paged_attention(
        x.query,
        x.key_cache,
        x.value_cache,
        out,
        x.block_table,
        x.seq_lens,
        x.query_start_loc,
        s.query_len,
        s.seq_len,
        x.scale,
    )
    return out


def measure_one(candidate: Candidate, x: Inputs, expected: torch.Tensor) -> Row:
    """Run `candidate` once, compare with `expected`, then time it."""
    import torch

    from benchmarks.timing import describe, kernel_us

    row = Row(x.model.name, x.shape.name, candidate.name, None)
    try:
        # NaN: a kernel that leaves part of the output unwritten fails the check
        out = torch.full_like(x.query, float("nan"))
        fn = KERNELS[candidate.kernel](x, out, **candidate.kwargs)
        fn()  # compile / autotune outside the timed part
        torch.cuda.synchronize()
        err = (out.float() - expected.float()).abs().max().item()
        row.max_abs_err = round(err, 5)
        if not err <= TOLERANCE:  # NaN too
            row.error = f"wrong result: max abs error {err:.3g} > {TOLERANCE}"
            return row
        timed = kernel_us(fn)
        row.us, row.timing, row.note = round(timed.us, 2), timed.method, timed.note
    except Exception as exc:  # a kernel that cannot run here: say why
        row.error = describe(exc)
    return row


def measure(
    models: Sequence[Model], shapes: Sequence[Shape], candidates: Sequence[Candidate]
) -> list[Row]:
    import torch

    rows = []
    for model in models:
        for shape in shapes:
            x = make_inputs(model, shape)
            expected = reference_output(x)
            for candidate in candidates:
                if shape.phase in candidate.phases:
                    rows.append(measure_one(candidate, x, expected))
                    print(progress(rows[-1]), flush=True)
            del x, expected
            torch.cuda.empty_cache()
    return rows


def progress(row: Row) -> str:
    """One line per measured cell while the run goes on."""
    what = f"{row.error}" if row.us is None else f"{row.us:.1f} us ({row.timing})"
    return f"{row.model} {row.shape} {row.candidate}: {what}"


# -- the table --------------------------------------------------------------------------------


def _cell(row: Row | None, baseline: Row | None) -> str:
    if row is None:
        return "-"
    if row.us is None:
        return "error"
    cell = f"{row.us:.1f}"
    if baseline is not None and baseline.us:
        cell += f" {row.us / baseline.us:.2f}x"
    return cell + ("*" if row.timing == "events" else "")


def table(rows: list[Row]) -> str:
    """Per model and phase, one line per candidate, one column per shape: µs per call and the
    ratio to `BASELINE` on that shape; then the errors and the notes."""
    phases = {s.name: s.phase for s in SHAPES}
    order = [c.name for c in CANDIDATES]
    by_key = {(r.model, r.shape, r.candidate): r for r in rows}
    blocks = []
    for model in dict.fromkeys(r.model for r in rows):
        for phase in ("decode", "prefill"):
            shapes = [
                s
                for s in dict.fromkeys(r.shape for r in rows if r.model == model)
                if phases.get(s, "decode") == phase
            ]
            if not shapes:
                continue
            names = {r.candidate for r in rows if r.model == model and r.shape in shapes}
            names = sorted(names, key=lambda n: order.index(n) if n in order else len(order))
            columns = [Column(f"{model} {phase} (us, x {BASELINE})", align="<")]
            columns += [Column(shape) for shape in shapes]
            body = [
                [name]
                + [
                    _cell(by_key.get((model, s, name)), by_key.get((model, s, BASELINE)))
                    for s in shapes
                ]
                for name in names
            ]
            blocks.append(text_table(columns, body))
    failed = [r for r in rows if r.error]
    if failed:
        blocks.append(
            "errors:\n"
            + "\n".join(f"  {r.candidate} on {r.model} {r.shape}: {r.error}" for r in failed)
        )
    events = [r for r in rows if r.timing == "events"]
    if events:
        blocks.append(
            "* CUDA events over back-to-back calls, the graph capture having failed:\n"
            + "\n".join(f"  {r.candidate} on {r.model} {r.shape}: {r.note}" for r in events)
        )
    checked = [r for r in rows if r.us is not None and r.max_abs_err is not None]
    if checked:
        worst = max(checked, key=lambda r: r.max_abs_err)
        blocks.append(
            f"largest max abs error of a timed kernel against the reference: "
            f"{worst.max_abs_err:.3g} ({worst.candidate} on {worst.model} {worst.shape}; "
            f"limit {TOLERANCE})"
        )
    return "\n\n".join(blocks)


# -- the command line -------------------------------------------------------------------------


@dataclass(frozen=True)
class Selection:
    models: list[Model]
    shapes: list[Shape]
    candidates: list[Candidate]
    json: Path | None


def parse_args(argv: list[str] | None = None) -> Selection:
    """The command line's models, shapes and candidates (unknown names refused)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, table in (("--models", MODELS), ("--shapes", SHAPES), ("--candidates", CANDIDATES)):
        names = [entry.name for entry in table]
        parser.add_argument(
            flag, type=name_list, default=names, help=f"comma-separated (all of {', '.join(names)})"
        )
    parser.add_argument("--json", type=Path, help="write the rows to this file")
    args = parser.parse_args(argv)
    refuse_unknown(parser, "--models", args.models, [m.name for m in MODELS])
    refuse_unknown(parser, "--shapes", args.shapes, [s.name for s in SHAPES])
    refuse_unknown(parser, "--candidates", args.candidates, [c.name for c in CANDIDATES])
    return Selection(
        [m for m in MODELS if m.name in args.models],
        [s for s in SHAPES if s.name in args.shapes],
        [c for c in CANDIDATES if c.name in args.candidates],
        args.json,
    )


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def decode_settings(models: Sequence[Model]) -> dict[str, str]:
    """How the flagos impl runs each model's decode batches here: this device's tuned table, or
    vLLM's rule where it has none."""
    import torch

    from vllm_fl.kernels import attention, attention_table

    rule = (
        f"vLLM's rule (SEGMENTS={attention_table.SEGMENTS}, "
        f"MIN_GRID_2D={attention_table.MIN_GRID_2D})"
    )
    device = torch.device("cuda", torch.cuda.current_device())
    return {
        f"decode[{m.name}]": (
            "tuned table"
            if attention.decode_table(device, m.heads, m.kv_heads, m.head_size, torch.bfloat16)
            else rule
        )
        for m in models
    }


def main(argv: list[str] | None = None) -> int:
    chosen = parse_args(argv)
    rows = measure(chosen.models, chosen.shapes, chosen.candidates)
    print(table(rows))
    if chosen.json:
        import torch
        import triton

        write_json(
            chosen.json,
            {
                "device": torch.cuda.get_device_name(),
                "torch": torch.__version__,
                "triton": triton.__version__,
                "vllm": _version("vllm"),
                "flag_gems": _version("flag_gems"),
                "flagos_settings": decode_settings(chosen.models),
                "rows": [asdict(r) for r in rows],
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

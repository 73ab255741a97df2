"""Host work of the flagos backend's launch code per call, on the CPU, with the launches stubbed.

In eager mode a decode step is bound by the host, and the flagos impls' host time is theirs and
the kernel launch's. This times the first part without a GPU or FlagGems: every impl is called on
CPU tensors with "on the current GPU" answered yes and every launch plan replaced by one that
launches nothing, so what is timed is the Python and torch work our code does per call
(checks, plan keys, output allocations). A per-call cost that creeps in (as Triton's
``cdiv``/``next_power_of_2``, which cost microseconds when called from the host, once did) shows
here before anyone has a GPU to see it.

    python -m benchmarks.bench_host_launch [--json F] [--repeat 5] [--number 20000]
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import platform
import types
from collections.abc import Callable
from datetime import date
from pathlib import Path

import torch

from benchmarks.timing import wall_us
from vllm_fl.backends.flaggems.impl import (  # noqa: E402
    activation,
    moe,
    normalization,
    rotary,
)
from vllm_fl.kernels import launch  # noqa: E402
from vllm_fl.kernels.moe import experts  # noqa: E402
from vllm_fl.kernels.moe import launch as moe_launch  # noqa: E402


class _NoLaunch:
    """Launch plans that launch nothing; what ``run`` binds to a call signature is found by
    ``launch_bound`` (the steady state of an eager op, as on the GPU)."""

    def __init__(self) -> None:
        self._bound: set = set()

    def launch(self, *args) -> None:
        pass

    def run(self, planned, signature=None, dynamic=0) -> None:
        if signature is not None:
            self._bound.add(signature)

    def launch_bound(self, signature, dynamic_args) -> bool:
        return signature in self._bound


@contextlib.contextmanager
def _patched(stubs: list[tuple[object, str, object]]):
    """Within: each (owner, name, stub) of ``stubs`` set as ``owner.name``; the originals after."""
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in stubs]
    try:
        for owner, name, stub in stubs:
            setattr(owner, name, stub)
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


@contextlib.contextmanager
def stubbed_launches():
    """Within: every tensor is "on the current GPU" and every launch plan launches nothing."""
    nothing = _NoLaunch()
    config = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1}
    kernels = experts.ExpertKernels(
        nothing, experts.GEMM_RUNTIME_PARAMS, lambda *shape: (config, tuple(config.items()))
    )
    stubs = [
        (launch, "on_current_gpu", lambda t: True),
        (launch, "plans_for", lambda kernel: nothing),
        (launch, "plans_of", lambda public, kernel: nothing),
        (experts, "flag_gems_kernels", lambda: kernels),
        (moe_launch, "topk_softmax_plans", lambda: nothing),
    ]
    with _patched(stubs):
        yield


class _StubKernel:
    """A Triton kernel by its parameters (``params``, as ``triton.JITFunction`` has them) whose
    launches, through the entry or its compiled kernel, launch nothing."""

    def __init__(self, function: Callable) -> None:
        signature = inspect.signature(inspect.unwrap(getattr(function, "fn", function)))
        self.params = [
            types.SimpleNamespace(name=name, default=param.default)
            for name, param in signature.parameters.items()
        ]

    def run(self, *args, grid, warmup, **kwargs):
        return self

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


@contextlib.contextmanager
def stubbed_attention():
    """Within: vLLM's ``unified_attention`` module with its kernels stubbed (its Python wrapper
    runs as it is), the replays made without their check against the wrapper (the stubs write
    nothing to compare), and vLLM's CPU build given the real Triton module its wrapper calls
    helpers of. Yields the module, or None where vLLM is not installed."""
    try:
        import triton
        from vllm.v1.attention.ops import triton_unified_attention as module
    except ImportError:
        yield None
        return
    from vllm_fl.kernels import attention

    stubs = [
        (module, "kernel_unified_attention", _StubKernel(module.kernel_unified_attention)),
        (module, "reduce_segments", _StubKernel(module.reduce_segments)),
        (module, "triton", triton),
        (launch, "triton_supported", lambda: True),
        (attention, "_checked", lambda found, tensors: found),
        (attention, "_decode_replays", {}),
        (attention, "_replaying", True),  # the cases set it; restored afterwards
        (torch.cuda, "is_current_stream_capturing", lambda: False),
    ]
    with _patched(stubs):
        yield module


def _decode_batch(seqs: int = 128) -> dict:
    """A decode batch of ``seqs`` sequences at Llama-3-8B's attention sizes, vLLM 0.24's caches."""
    key_cache, value_cache = torch.zeros(64, 2, 16, 8, 128, dtype=torch.bfloat16).unbind(1)
    query = torch.randn(seqs, 32, 128, dtype=torch.bfloat16)
    return dict(
        query=query,
        key_cache=key_cache,
        value_cache=value_cache,
        output=torch.empty_like(query),
        block_table=torch.zeros(seqs, 8, dtype=torch.int32),
        seq_lens=torch.full((seqs,), 40, dtype=torch.int32),
        query_start_loc=torch.arange(seqs + 1, dtype=torch.int32),
        max_query_len=1,
        max_seq_len=40,
        softmax_scale=128**-0.5,
        causal=True,
        window_left=-1,
        logits_soft_cap=0.0,
        sinks=None,
    )


def attention_cases() -> dict[str, Callable[[], object]]:
    """The portable attention's decode call (128 sequences), through vLLM's wrapper and
    replayed, and its cache write (128 tokens); to be timed within `stubbed_attention`."""
    from vllm_fl.kernels import attention

    batch = _decode_batch()
    key_cache, value_cache = batch["key_cache"], batch["value_cache"]
    key, value = torch.randn(2, 128, 8, 128, dtype=torch.bfloat16).unbind(0)
    slots = torch.arange(128)

    def through(replaying: bool) -> Callable[[], None]:
        def call() -> None:
            attention._replaying = replaying
            attention.unified_attention(**batch)

        return call

    return {
        "paged_attention decode, vLLM's wrapper (128 seqs)": through(False),
        "paged_attention decode, replayed (128 seqs)": through(True),
        "reshape_and_cache_flash (128 tokens)": lambda: attention.reshape_and_cache_flash(
            key, value, key_cache, value_cache, slots
        ),
    }


def cases() -> dict[str, Callable[[], object]]:
    """One decode token at Llama-3-8B's sizes (Qwen3-MoE's for the MoE ops): op -> call."""
    head, q_heads, kv_heads, hidden = 128, 32, 8, 4096
    rope = types.SimpleNamespace(
        cos_sin_cache=torch.randn(8192, head), head_size=head, rotary_dim=head, is_neox_style=True
    )
    qkv = torch.randn(1, (q_heads + 2 * kv_heads) * head, dtype=torch.bfloat16)
    query, key, _ = qkv.split([q_heads * head, kv_heads * head, kv_heads * head], dim=-1)
    positions = torch.tensor([17])
    norm = types.SimpleNamespace(
        weight=torch.nn.Parameter(torch.ones(hidden, dtype=torch.bfloat16)), variance_epsilon=1e-6
    )
    x, residual = (torch.randn(1, hidden, dtype=torch.bfloat16) for _ in range(2))
    gate_up = torch.randn(1, 2 * 14336, dtype=torch.bfloat16)
    qwen3_qkv = torch.randn(1, (32 + 2 * 4) * head, dtype=torch.bfloat16)
    q_by_head = qwen3_qkv[:, : 32 * head].view(1, 32, head)
    head_norm = types.SimpleNamespace(
        weight=torch.nn.Parameter(torch.ones(head, dtype=torch.bfloat16)), variance_epsilon=1e-6
    )
    experts_n, moe_hidden, inter, top_k = 128, 2048, 768, 8
    topk_ids = torch.randperm(experts_n)[:top_k].view(1, top_k).to(torch.int32)
    topk_weights = torch.rand(1, top_k)
    padded = top_k + experts_n * 15
    aligned = [torch.empty(n, dtype=torch.int32) for n in (padded, -(-padded // 16), 1)]
    per_slot = torch.randn(1, top_k, moe_hidden, dtype=torch.bfloat16)
    summed = torch.empty(1, moe_hidden, dtype=torch.bfloat16)
    w1 = torch.empty(experts_n, 2 * inter, moe_hidden, dtype=torch.bfloat16)
    w2 = torch.empty(experts_n, moe_hidden, inter, dtype=torch.bfloat16)
    hidden_states = torch.randn(1, moe_hidden, dtype=torch.bfloat16)
    scores, bias = torch.randn(1, 256), torch.randn(256)
    routed = [
        torch.empty(1, top_k, dtype=dtype) for dtype in (torch.float32, torch.int32, torch.int32)
    ]
    gating = torch.randn(1, experts_n, dtype=torch.bfloat16)
    return {
        "rotary_embedding (eager variant)": lambda: rotary.rotary_embedding_inplace(
            rope, positions, query, key
        ),
        "rotary_embedding": lambda: rotary.rotary_embedding(rope, positions, query, key),
        "rms_norm+residual (eager variant)": lambda: normalization.rms_norm_inplace(
            norm, x, residual
        ),
        "rms_norm+residual": lambda: normalization.rms_norm(norm, x, residual),
        "rms_norm": lambda: normalization.rms_norm(norm, x),
        "rms_norm (Qwen3 per-head view)": lambda: normalization.rms_norm(head_norm, q_by_head),
        "silu_and_mul": lambda: activation.silu_and_mul(None, gate_up),
        "topk_softmax": lambda: moe.topk_softmax(*routed, gating, True),
        "grouped_topk": lambda: moe.grouped_topk(scores, 8, 4, 8, True, 2.5, bias, 1),
        "moe_align_block_size": lambda: moe.moe_align_block_size(topk_ids, experts_n, 16, *aligned),
        "moe_sum": lambda: moe.moe_sum(per_slot, summed),
        "fused_experts": lambda: moe.fused_experts(
            hidden_states, w1, w2, topk_weights, topk_ids, global_num_experts=experts_n
        ),
    }


def measure(repeat: int, number: int) -> list[dict]:
    rows = []
    with stubbed_launches(), stubbed_attention() as vllm_attention:
        timed = {**cases(), **(attention_cases() if vllm_attention is not None else {})}
        for name, call in timed.items():
            call()
            rows.append({"op": name, "us": round(wall_us(call, number, repeat), 2)})
    return rows


def format_table(rows: list[dict]) -> str:
    width = max(len(row["op"]) for row in rows)
    lines = [f"{'op (1 token)':<{width}}  host µs"]
    lines += [f"{row['op']:<{width}}  {row['us']:7.2f}" for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--number", type=int, default=20000)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    rows = measure(args.repeat, args.number)
    print(format_table(rows))
    if args.json:
        result = {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads",
            "date": date.today().isoformat(),
            "repeat": args.repeat,
            "number": args.number,
            "rows": rows,
        }
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The kernel library's one-launch routing kernels (``routing_kernels``) against the
reference impls, run in Triton's interpreter on the CPU, and compiled for an H100 (sm_90) by
Triton's own compiler. The GPU parity tests run them for real.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from triton_helpers import (
    needs_interpreter_loops,
    compile_for_h100,
    interpret,
    needs_nvidia_compiler,
)  # noqa: E402
from vllm_fl.kernels import routing_kernels as rk  # noqa: E402
from vllm_fl.backends.reference.impl import moe as ref  # noqa: E402

#: tokens, experts, groups, topk_group, topk, renormalize, scale, scoring_func, scores dtype
GROUPED = [
    (1, 256, 8, 4, 8, True, 2.5, 1, torch.float32),  # DeepSeek-V3, one decode token
    (5, 256, 8, 4, 8, True, 2.5, 1, torch.bfloat16),
    (7, 64, 4, 2, 4, False, 1.0, 0, torch.float32),
    (3, 96, 6, 3, 6, True, 1.0, 1, torch.float16),  # groups and topk not powers of two
    (2, 16, 8, 8, 16, False, 1.5, 0, torch.float32),  # every expert picked
]


def _grouped_inputs(tokens, experts, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(tokens, experts, generator=gen).to(dtype)
    bias = torch.randn(experts, generator=gen) * 0.1
    return scores, bias


@pytest.mark.parametrize("case", GROUPED, ids=lambda c: "t{}-e{}-g{}-tg{}-k{}".format(*c[:5]))
def test_grouped_topk_matches_the_reference(case):
    tokens, experts, groups, topk_group, topk, renorm, scale, scoring, dtype = case
    scores, bias = _grouped_inputs(tokens, experts, dtype)
    weights = torch.full((tokens, topk), -7.0)
    ids = torch.full((tokens, topk), -7, dtype=torch.int32)
    args = (scores, groups, topk_group, topk, renorm, scale, bias, scoring)
    launch = rk.grouped_topk_launch(*args, weights, ids)
    assert launch is not None
    interpret(rk.grouped_topk_kernel, launch.grid, launch.args, launch.kwargs)
    expected = ref.grouped_topk(*args)
    got_w, got_ids = ref.grouped_topk_canonical((weights, ids), *args)
    exp_w, exp_ids = ref.grouped_topk_canonical(expected, *args)
    assert torch.equal(got_ids, exp_ids)
    torch.testing.assert_close(got_w, exp_w, atol=1e-5, rtol=1e-5)


def test_grouped_topk_calls_it_does_not_take():
    scores, bias = _grouped_inputs(2, 64, torch.float32)
    out = (torch.empty(2, 4), torch.empty(2, 4, dtype=torch.int32))
    take = rk.grouped_topk_launch
    assert take(scores, 4, 2, 4, True, 1.0, bias, 1, *out) is not None
    assert take(scores, 5, 2, 4, True, 1.0, bias, 1, *out) is None  # 64 experts, 5 groups
    assert take(scores, 64, 2, 2, True, 1.0, bias, 1, *out) is None  # groups of one expert
    assert take(scores, 4, 2, 40, True, 1.0, bias, 1, *out) is None  # more than two groups hold
    assert take(scores, 4, 2, 4, True, 1.0, bias, 2, *out) is None  # unknown scoring function
    assert take(scores.t(), 4, 2, 4, True, 1.0, bias, 1, *out) is None  # experts strided
    assert take(scores, 4, 2, 4, True, 1.0, bias[:32], 1, *out) is None


#: pairs shape, experts, block size, sorted length, blocks length
ALIGNS = [
    ((1, 8), 128, 16, 8 + 128 * 15, 121),  # one decode token, Qwen3-MoE
    ((7, 2), 8, 4, 38, 10),
    ((1, 2), 8, 16, 32, 2),
    ((8, 8), 64, 16, 64 + 64 * 15, 64),
    ((8, 8), 256, 64, 64 + 256 * 63, 253),
    ((2, 8), 512, 16, 16 + 512 * 15, 481),
    ((16, 8), 512, 16, 128 + 512 * 15, 488),  # 4 chunks of 32 pairs (512 experts)
    ((16, 8), 128, 16, 128 + 128 * 15, 128),  # the most pairs the kernel takes
    ((64, 2), 8, 4, 128 + 8 * 3, 38),
]


@needs_interpreter_loops
@pytest.mark.parametrize("ids_dtype", [torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("case", ALIGNS, ids=lambda c: "p{}x{}-e{}-b{}".format(*c[0], *c[1:3]))
def test_alignment_matches_the_reference_exactly(case, ids_dtype):
    shape, experts, block, n_sorted, n_blocks = case
    gen = torch.Generator().manual_seed(1)
    topk_ids = torch.randint(0, experts, shape, generator=gen).to(ids_dtype)
    if shape[0] > 1:
        topk_ids[1] = topk_ids[0]  # two tokens routed alike: ranks within an expert matter
    if shape[0] > 8:  # and alike across chunks
        topk_ids[-1] = topk_ids[0]
    got = [torch.full((n,), -5, dtype=torch.int32) for n in (n_sorted, n_blocks, 1)]
    expected = [t.clone() for t in got]
    launch = rk.align_launch(topk_ids, experts, block, *got)
    assert launch is not None
    interpret(rk.align_pairs_kernel, launch.grid, launch.args, launch.kwargs)
    ref.moe_align_block_size(topk_ids, experts, block, *expected)
    for name, g, e in zip(
        ("sorted_token_ids", "experts_ids", "num_tokens_post_pad"), got, expected
    ):
        assert torch.equal(g, e), name


def test_alignment_calls_it_does_not_take():
    out = [torch.empty(n, dtype=torch.int32) for n in (4000, 300, 1)]
    many = torch.zeros(rk.ALIGN_MAX_PAIRS + 1, dtype=torch.int32)
    assert rk.align_launch(many[:8], 8, 16, *out) is not None
    assert rk.align_launch(many, 8, 16, *out) is None
    assert rk.align_launch(many[:8], rk.ALIGN_MAX_EXPERTS + 1, 16, *out) is None
    # the pairs-by-experts comparison stays within one tile: 512 experts take 32 pairs a step
    assert rk.align_launch(many[:64], 512, 16, *out).kwargs["CHUNK"] == 32
    assert rk.align_launch(many[:128], 128, 16, *out).kwargs["CHUNK"] == 128
    assert rk.align_launch(many[:8], 8, 16, out[0].long(), *out[1:]) is None


@needs_nvidia_compiler
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("sigmoid", [True, False])
def test_grouped_topk_compiles_for_an_h100(dtype, sigmoid):
    signature = {
        "scores_ptr": f"*{dtype}",
        "bias_ptr": "*fp32",
        "weights_ptr": "*fp32",
        "ids_ptr": "*i32",
        "scores_row": "i32",
        "scale": "fp32",
    }
    constexprs = dict(
        GROUPS=8,
        PER_GROUP=32,
        TOPK_GROUP=4,
        TOPK=8,
        BLOCK_G=8,
        BLOCK_P=32,
        BLOCK_K=8,
        SIGMOID=sigmoid,
        RENORMALIZE=True,
    )
    assert compile_for_h100(rk.grouped_topk_kernel, signature, constexprs, num_warps=4)


@needs_nvidia_compiler
@pytest.mark.parametrize("ids_dtype", ["i32", "i64"])
def test_alignment_compiles_for_an_h100(ids_dtype):
    signature = {
        "topk_ids_ptr": f"*{ids_dtype}",
        "sorted_ptr": "*i32",
        "expert_ids_ptr": "*i32",
        "total_ptr": "*i32",
        "pairs": "i32",
        "n_sorted": "i32",
        "n_blocks": "i32",
    }
    constexprs = dict(
        EXPERTS=128, BLOCK_SIZE=16, CHUNK=128, BLOCK_E=128, FILL_BLOCK=1024, BLOCKS_PER_STEP=128
    )
    assert compile_for_h100(rk.align_pairs_kernel, signature, constexprs, num_warps=rk.ALIGN_WARPS)


@needs_interpreter_loops
@pytest.mark.parametrize(
    "pairs, padded, blocks, counters", [(8, 30, 3, 5), (1000, 2920, 183, 16645)]
)
def test_the_prepare_kernel_fills_the_padding_and_zeroes_the_rest(pairs, padded, blocks, counters):
    sorted_ids = torch.full((padded,), -7, dtype=torch.int32)
    expert_ids = torch.full((blocks,), -7, dtype=torch.int32)
    scratch = torch.full((counters,), -7, dtype=torch.int32)
    planned = rk.align_prepare_launch(pairs, sorted_ids, expert_ids, scratch)
    interpret(rk.align_prepare_kernel, planned.grid, planned.args, planned.kwargs)
    assert (sorted_ids == pairs).all()
    assert (expert_ids == 0).all() and (scratch == 0).all()


def test_the_prepare_launch_keys_on_the_device_only():
    """No size in the plan key: the kernel specialises on none, one compilation serves all."""
    keys = set()
    for pairs in (129, 1000, 4096):
        padded = pairs + 128 * 15
        buffers = (
            torch.empty(padded, dtype=torch.int32),
            torch.empty(-(-padded // 16), dtype=torch.int32),
            torch.empty(129 * 128 + 132, dtype=torch.int32),
        )
        keys.add(rk.align_prepare_launch(pairs, *buffers).layout)
    assert keys == {(None,)}


@needs_nvidia_compiler
def test_the_prepare_kernel_compiles_for_an_h100():
    signature = {
        "sorted_ptr": "*i32",
        "expert_ids_ptr": "*i32",
        "counters_ptr": "*i32",
        "pairs": "i32",
        "n_sorted": "i32",
        "n_blocks": "i32",
        "n_counters": "i32",
    }
    assert compile_for_h100(rk.align_prepare_kernel, signature, {"BLOCK": 1024}, num_warps=4)

"""``routing.topk_softmax`` launches FlagGems' top-k softmax kernel through a launch plan with the
launch parameters FlagGems' function derives: the first call of a layout through the kernel's
entry, later ones straight to the compiled kernel with their own tensors and token count; calls
FlagGems' function rejects or that the plan cannot key go to that function. FlagGems is not
needed: the kernel is a stand-in with FlagGems' parameters and the compiled kernel a recorder
(no GPU here); the GPU tests run the real one twice per layout.
"""

import sys
import types

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from recorded_plans import recorded_plans  # noqa: E402
from vllm_fl.kernels import launch, routing  # noqa: E402
from vllm_fl.kernels.moe import launch as moe_launch  # noqa: E402


@triton.jit
def topk_gating_softmax_kernel(  # FlagGems' parameters (flag_gems/fused/topk_softmax.py)
    input_ptr,
    finished_ptr,
    output_ptr,
    indices_ptr,
    source_rows_ptr,
    num_rows,
    k,
    num_experts,
    start_expert,
    end_expert,
    renormalize: tl.constexpr,
    INDEX_TY: tl.constexpr,
    BLOCK_SIZE_ROWS: tl.constexpr,
    BLOCK_SIZE_EXPERTS: tl.constexpr,
):
    pass


@triton.jit
def renamed_kernel(input_ptr, finished_ptr, output_ptr, BLOCK: tl.constexpr):
    pass


@pytest.fixture
def recorded(monkeypatch):
    """The stand-in kernel's recorded plans behind ``moe_launch.topk_softmax_plans``; FlagGems'
    function replaced by a recorder of its calls. Returns (plans, compiled, entry, gems_calls)."""
    plans, compiled, entry = recorded_plans(topk_gating_softmax_kernel)
    gems_calls = []
    monkeypatch.setattr(moe_launch, "topk_softmax_plans", lambda: plans)
    monkeypatch.setattr(launch, "on_current_gpu", lambda t: True)
    gems = types.ModuleType("flag_gems")
    gems.topk_softmax = lambda *args: gems_calls.append(args)
    monkeypatch.setitem(sys.modules, "flag_gems", gems)
    return plans, compiled, entry, gems_calls


def _buffers(tokens, experts, topk, index_dtype=torch.int32):
    return (
        torch.empty(tokens, topk, dtype=torch.float32),
        torch.empty(tokens, topk, dtype=index_dtype),
        torch.empty(tokens, topk, dtype=torch.int32),
        torch.randn(tokens, experts, dtype=torch.bfloat16),
    )


def test_first_call_through_the_entry_later_ones_to_the_compiled_kernel(recorded):
    _plans, compiled, entry, gems_calls = recorded
    first = _buffers(3, 128, 8)
    routing.topk_softmax(*first, True)
    second = _buffers(3, 128, 8)
    routing.topk_softmax(*second, True)
    assert not gems_calls and len(entry) == 1
    grid, args, kwargs = entry[0]
    # FlagGems' choice for 128 experts: 128-wide blocks, 8 rows per program, 4 warps
    assert grid == (1,) and args[0] is first[3] and args[1] is None
    assert args[2:5] == first[:3] and args[5:] == (3, 8, 128, 0, 128)
    assert kwargs == {
        "renormalize": True,
        "INDEX_TY": tl.int32,
        "BLOCK_SIZE_ROWS": 8,
        "BLOCK_SIZE_EXPERTS": 128,
        "num_warps": 4,
    }
    grid, args = compiled.launches[0]
    assert grid == (1, 1, 1) and args[0] is second[3] and args[2:5] == second[:3]
    assert args[5:10] == (3, 8, 128, 0, 128) and args[10:] == (True, tl.int32, 8, 128)


def test_token_counts_share_a_plan_unless_triton_specialises_on_them(recorded):
    _plans, compiled, entry, _gems = recorded
    for tokens in (3, 5, 16, 1, 9):
        routing.topk_softmax(*_buffers(tokens, 64, 4), False)
    # 3 and 5 (and 9) compile alike; 16 (divisible by 16) and 1 are their own specialisations
    assert [args[5] for _grid, args, _kwargs in entry] == [3, 16, 1]
    assert [(grid, args[5]) for grid, args in compiled.launches] == [((1, 1, 1), 5), ((1, 1, 1), 9)]


def test_many_experts_get_one_row_and_one_warp_per_program(recorded):
    _plans, _compiled, entry, _gems = recorded
    routing.topk_softmax(*_buffers(5, 256, 8), False)
    grid, _args, kwargs = entry[0]
    assert grid == (5,) and kwargs["BLOCK_SIZE_ROWS"] == 1 and kwargs["num_warps"] == 1
    assert kwargs["BLOCK_SIZE_EXPERTS"] == 256


@pytest.mark.parametrize(
    "case",
    ["no tokens", "int16 ids", "top-k over 32", "unaligned logits", "three-dimensional logits"],
)
def test_calls_the_plan_cannot_take_go_to_flag_gems(recorded, case):
    _plans, compiled, entry, gems_calls = recorded
    weights, ids, sources, logits = _buffers(0 if case == "no tokens" else 4, 64, 4)
    if case == "int16 ids":
        ids = ids.to(torch.int16)
    elif case == "top-k over 32":
        weights, ids, sources, logits = _buffers(4, 64, 33)
    elif case == "unaligned logits":
        logits = torch.randn(4 * 64 + 1, dtype=torch.bfloat16)[1:].view(4, 64)
    elif case == "three-dimensional logits":
        logits = logits.view(2, 2, 64)
    routing.topk_softmax(weights, ids, sources, logits, False)
    assert len(gems_calls) == 1 and not entry and not compiled.launches
    assert gems_calls[0][3] is logits


def test_a_kernel_with_other_parameters_gets_no_plan(monkeypatch):
    monkeypatch.setattr(launch, "kernel_of", lambda public, kernel: renamed_kernel)
    moe_launch.topk_softmax_plans.cache_clear()
    try:
        assert moe_launch.topk_softmax_plans() is None
    finally:
        moe_launch.topk_softmax_plans.cache_clear()

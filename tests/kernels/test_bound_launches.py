"""The kernel functions that launch FlagGems' kernels through launches bound to a call signature:
the first call of a layout launches through the plan, later calls with the same signature
launch the same compiled kernel with the new tensors' data pointers and the first call's other
arguments, and a new layout is bound anew. FlagGems is not needed: the kernels are stand-ins
with FlagGems' parameters and the compiled kernel a recorder (no GPU here); the GPU parity tests
run the real ones, twice per layout.
"""

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from recorded_plans import recorded_plans  # noqa: E402
from vllm_fl.kernels import attention, launch, norm, pointwise  # noqa: E402


@triton.jit
def swiglu_kernel(  # FlagGems' parameters (flag_gems/fused/swiglu.py)
    input_ptr,
    output_ptr,
    M,
    H,
    stride_in_m,
    stride_in_h,
    stride_out_m,
    stride_out_h,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_H: tl.constexpr,
):
    pass


@triton.jit
def fused_add_rms_norm_kernel(  # FlagGems' parameters (flag_gems/fused/fused_add_rms_norm.py)
    input_ptr,
    residual_ptr,
    w_ptr,
    in_stride_r,
    in_stride_c,
    r_stride_r,
    r_stride_c,
    N,
    eps,
    BLOCK_SIZE: tl.constexpr,
):
    pass


@triton.jit
def reshape_and_cache_flash_kernel(  # FlagGems' parameters (fused/reshape_and_cache_flash.py)
    key,
    value,
    key_cache,
    value_cache,
    slot_mapping,
    block_stride,
    key_stride,
    value_stride,
    num_heads,
    head_size,
    block_size,
    k_scale,
    v_scale,
    n: tl.constexpr,
):
    pass


@pytest.fixture
def recorded(monkeypatch):
    """plans_of(public, kernel) answers recorded plans of the stand-in ``kernel``; returns
    kernel name -> (plans, compiled, entry) as ``recorded_plans`` makes them."""
    made = {}

    def plans_of(public, kernel):
        if kernel not in made:
            made[kernel] = recorded_plans(globals()[kernel])
        return made[kernel][0]

    monkeypatch.setattr(launch, "plans_of", plans_of)
    monkeypatch.setattr(launch, "on_current_gpu", lambda t: True)
    return made


def test_silu_and_mul_launches_the_bound_kernel_with_its_new_tensors(recorded):
    first, second = torch.randn(3, 2 * 96), torch.randn(3, 2 * 96)
    out1 = pointwise.silu_and_mul(first)
    out2 = pointwise.silu_and_mul(second)
    _, compiled, entry = recorded["swiglu_kernel"]
    assert len(entry) == 1 and entry[0][1][:2] == (first, out1)
    grid, args = compiled.launches[0]
    assert grid == (1, 2, 1) and args[:2] == (second.data_ptr(), out2.data_ptr())
    assert args[2:] == (3, 96, 192, 1, 96, 1, 64, 64) and out2.shape == (3, 96)
    for _ in range(2):  # another layout: launched with its own arguments, then bound to them
        pointwise.silu_and_mul(torch.randn(5, 2 * 96))
    assert len(entry) == 1 and [args[2] for _grid, args in compiled.launches] == [3, 5, 5]


def test_add_and_normalise_in_place_launches_the_bound_kernel(recorded):
    weight = torch.nn.Parameter(torch.ones(64))
    x, residual = torch.randn(4, 64), torch.randn(4, 64)
    norm.fused_add_rms_norm_inplace(x, residual, weight, 1e-5)
    x2, residual2 = torch.randn(4, 64), torch.randn(4, 64)
    norm.fused_add_rms_norm_inplace(x2, residual2, weight, 1e-5)
    _, compiled, entry = recorded["fused_add_rms_norm_kernel"]
    assert len(entry) == 1
    grid, args = compiled.launches[0]
    assert grid == (4, 1, 1)
    assert args[:3] == (x2.data_ptr(), residual2.data_ptr(), weight.data_ptr())
    assert args[3:] == (64, 1, 64, 1, 64, 1e-5, 64)
    # another layer's constant: not the bound launch's
    norm.fused_add_rms_norm_inplace(x2, residual2, weight, 1e-6)
    assert len(entry) == 1 and compiled.launches[-1][1][8] == 1e-6


def test_kv_cache_write_launches_the_bound_kernel_with_its_new_tensors(recorded):
    # vLLM 0.24's caches: the halves of [blocks, 2, block_size, kv_heads, head_size]
    key_cache, value_cache = torch.zeros(6, 2, 16, 2, 64, dtype=torch.float16).unbind(1)
    calls = []
    for tokens in (9, 9, 4):
        key, value = torch.randn(2, tokens, 2, 64, dtype=torch.float16).unbind(0)
        slots = torch.randperm(96)[:tokens]
        attention.reshape_and_cache_flash(key, value, key_cache, value_cache, slots)
        calls.append((key, value, slots))
    _, compiled, entry = recorded["reshape_and_cache_flash_kernel"]
    # the first call of each layout goes through the entry, with FlagGems' arguments
    assert [grid for grid, _args, _kwargs in entry] == [(9,), (4,)]
    (_grid, args, kwargs) = entry[0]
    key, value, slots = calls[0]
    assert args[:5] == (key, value, key_cache, value_cache, slots)
    assert args[5:11] == (key_cache.stride(0), 128, 128, 2, 64, 16)
    assert args[11] is args[12] and args[11].item() == 1.0 and kwargs == {"n": 128}
    # the second call of the first layout: the bound launch, with the new tensors' pointers
    grid, bound = compiled.launches[0]
    key, value, slots = calls[1]
    pointers = (key, value, key_cache, value_cache, slots)
    assert grid == (9, 1, 1) and bound[:5] == tuple(t.data_ptr() for t in pointers)
    assert bound[5:11] == args[5:11] and bound[-1] == 128

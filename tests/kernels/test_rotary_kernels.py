"""The kernel library's rotary kernel (``rotary_kernels``), in place and into new tensors,
against the reference impl, run in
Triton's interpreter on the CPU, and compiled for an H100 (sm_90) by Triton's own compiler where
its NVIDIA backend is installed (no GPU needed to compile). The GPU parity tests run it for real.

Layouts as vLLM passes them: query and key slices of one qkv tensor (row stride larger than the
row), GPT-NeoX and GPT-J style, partial rotary (rotary_dim < head_size), no key, head counts that
are not multiples of the heads per program.
"""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")

from triton_helpers import compile_for_h100, interpret, needs_nvidia_compiler  # noqa: E402
from vllm_fl.kernels import rotary_kernels  # noqa: E402
from vllm_fl.backends.reference.impl.rotary import rotary_embedding  # noqa: E402

MAX_POSITIONS = 64
#: (q_heads, k_heads or None, head_size, rotary_dim, is_neox_style)
LAYOUTS = [
    (4, 2, 16, 16, True),
    (4, 2, 16, 16, False),
    (5, 3, 16, 8, True),
    (5, 3, 16, 8, False),
    (9, None, 32, 32, True),
    (2, 1, 64, 32, False),
]


def _layer(head_size: int, rotary_dim: int, is_neox_style: bool):
    """What the impls read from vLLM's RotaryEmbedding, with vLLM's cos/sin cache."""
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim))
    freqs = torch.outer(torch.arange(MAX_POSITIONS, dtype=torch.float32), inv_freq)
    cache = torch.cat((freqs.cos(), freqs.sin()), dim=-1)
    return types.SimpleNamespace(
        cos_sin_cache=cache, head_size=head_size, rotary_dim=rotary_dim, is_neox_style=is_neox_style
    )


def _qkv(tokens: int, q_heads: int, k_heads: int | None, head_size: int, dtype):
    """A qkv output and its query/key slices (views), as vLLM's attention layers split it."""
    q_size, k_size = q_heads * head_size, (k_heads or 0) * head_size
    qkv = torch.randn(tokens, q_size + 2 * k_size + 3, dtype=torch.float32).to(dtype)
    query = qkv[:, :q_size]
    key = qkv[:, q_size : q_size + k_size] if k_heads else None
    return qkv, query, key


def _run_interpreted(launch) -> None:
    interpret(rotary_kernels.rotary_kernel, launch.grid, launch.args, launch.kwargs)


@pytest.mark.parametrize("in_place", [True, False], ids=["in-place", "new-tensors"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize(
    "layout",
    LAYOUTS,
    ids=lambda l: "q{}k{}-d{}r{}-{}".format(*l[:4], "neox" if l[4] else "gptj"),
)
def test_matches_the_reference(layout, dtype, in_place):
    q_heads, k_heads, head_size, rotary_dim, neox = layout
    torch.manual_seed(0)
    tokens = 7
    layer = _layer(head_size, rotary_dim, neox)
    qkv, query, key = _qkv(tokens, q_heads, k_heads, head_size, dtype)
    positions = torch.randint(0, MAX_POSITIONS, (tokens,))
    # expected: the reference in float32, from the same inputs
    exp_q, exp_k = rotary_embedding(
        layer, positions, query.float(), None if key is None else key.float()
    )
    before = qkv.clone()
    cache = layer.cos_sin_cache.to(dtype)
    cos, sin = cache[:, : rotary_dim // 2], cache[:, rotary_dim // 2 :]
    outputs = ()
    if not in_place:
        outputs = (torch.full(query.shape, float("nan"), dtype=dtype),)
        outputs += (None if key is None else torch.full(key.shape, float("nan"), dtype=dtype),)
    args = (positions, query, key, cos, sin, head_size, rotary_dim, neox, *outputs)
    launch = rotary_kernels.launch_of(*args)
    assert launch is not None
    _run_interpreted(launch)
    got_q, got_k = (query, key) if in_place else outputs
    tol = {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 4e-3, "rtol": 4e-3}
    torch.testing.assert_close(got_q.float(), exp_q, **tol)
    if key is not None:
        torch.testing.assert_close(got_k.float(), exp_k, **tol)
    if in_place:
        written = query.shape[1] + (0 if key is None else key.shape[1])
        assert torch.equal(qkv[:, written:], before[:, written:]), "wrote outside query and key"
    else:
        assert torch.equal(qkv, before), "changed its inputs"


def test_layouts_it_does_not_take():
    layer = _layer(16, 16, True)
    cos, sin = layer.cos_sin_cache[:, :8], layer.cos_sin_cache[:, 8:]
    positions = torch.zeros(3, dtype=torch.int64)
    query = torch.randn(3, 64)
    args = (cos, sin, 16, 16, True)
    assert rotary_kernels.launch_of(positions[:0], query[:0], None, *args) is None  # no tokens
    strided = torch.randn(3, 128)[:, ::2]
    assert rotary_kernels.launch_of(positions, strided, None, *args) is None  # features strided
    assert rotary_kernels.launch_of(positions, query.view(3, 4, 16), None, *args) is None
    assert rotary_kernels.launch_of(positions, query, query.half(), *args) is None  # mixed dtypes
    assert rotary_kernels.launch_of(positions, query, None, *args) is not None
    out = torch.empty(3, 64)
    assert rotary_kernels.launch_of(positions, query, None, *args, out, None) is not None
    assert rotary_kernels.launch_of(positions, query, None, *args, out[:, :32], None) is None
    assert rotary_kernels.launch_of(positions, query, query, *args, out, None) is None  # no key out


@needs_nvidia_compiler
@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("rest", [0, 64], ids=["in-place", "partial-new-tensors"])
def test_compiles_for_an_h100(neox, dtype, rest):
    pointers = ("q_ptr", "k_ptr", "q_out_ptr", "k_out_ptr", "cos_ptr", "sin_ptr")
    signature = {name: f"*{dtype}" for name in pointers}
    signature.update(pos_ptr="*i64", pos_stride="i32", cache_row="i32")
    signature.update({name: "i32" for name in ("q_row", "k_row", "q_out_row", "k_out_row")})
    constexprs = dict(
        Q_HEADS=32,
        K_HEADS=8,
        HEAD_SIZE=128,
        ROT_HALF=32,
        HALF_BLOCK=32,
        REST_BLOCK=rest,
        BLOCK_H=8,
        NEOX=neox,
    )
    kernel = rotary_kernels.rotary_kernel
    assert compile_for_h100(kernel, signature, constexprs, rotary_kernels.NUM_WARPS)

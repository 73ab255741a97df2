"""The kernel functions that launch the library's own kernels, end to end on the CPU: the
function believes it is on the GPU, and its launch plans run the kernel in Triton's interpreter.
What is checked is the host's part (which calls take the kernel, the arguments and outputs it
builds), against the reference impl; calls the kernels do not take are left to FlagGems'
functions.
"""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from triton_helpers import needs_interpreter_loops, interpret  # noqa: E402
from vllm_fl.backends.reference.impl import moe as ref_moe  # noqa: E402
from vllm_fl.backends.reference.impl import rotary as ref_rotary  # noqa: E402
from vllm_fl.kernels import launch, norm, rotary, routing  # noqa: E402


class _Interpreted:
    """Launch plans that run the kernel in Triton's interpreter, counting launches; launches
    bound to a call signature (``KernelPlans.launch_bound``) replay with the new tensors (the
    fixture has ``launch.pointers`` answer them rather than their data pointers)."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.launches = 0
        self.bound_launches = 0
        self._bound = {}

    def run(self, planned, signature=None, dynamic=0):
        interpret(self.kernel, planned.grid, planned.args, planned.kwargs)
        self.launches += 1
        if signature is not None:
            self._bound[signature] = (planned.grid, planned.args[dynamic:], planned.kwargs)

    def launch_bound(self, signature, dynamic_args):
        if signature not in self._bound:
            return False
        grid, fixed, kwargs = self._bound[signature]
        interpret(self.kernel, grid, (*dynamic_args, *fixed), kwargs)
        self.launches += 1
        self.bound_launches += 1
        return True


@pytest.fixture
def own_kernels(monkeypatch) -> dict[str, _Interpreted]:
    """The kernel functions see the current GPU; their own-kernel plans interpret. Returns the
    plans made, by kernel name."""
    made: dict[str, _Interpreted] = {}

    def plans_for(kernel) -> _Interpreted:
        name = kernel.fn.__name__
        if name not in made:
            made[name] = _Interpreted(kernel)
        return made[name]

    data_pointers = launch.pointers

    def tensors_if_aligned(*tensors):
        # Triton's interpreter takes tensors, not the data pointers a bound launch passes
        return list(tensors) if data_pointers(*tensors) is not None else None

    monkeypatch.setattr(launch, "on_current_gpu", lambda t: True)
    monkeypatch.setattr(launch, "plans_for", plans_for)
    monkeypatch.setattr(launch, "pointers", tensors_if_aligned)
    return made


def test_grouped_topk_runs_the_one_launch_kernel(own_kernels):
    gen = torch.Generator().manual_seed(3)
    scores = torch.randn(3, 256, generator=gen)
    bias = torch.randn(256, generator=gen) * 0.1
    args = (scores, 8, 4, 6, True, 2.5, bias, 1)  # topk 6: FlagGems' kernel cannot compile it
    got = routing.grouped_topk(*args)
    assert own_kernels["grouped_topk_kernel"].launches == 1
    assert got[0].dtype == torch.float32 and got[1].dtype == torch.int32
    got_w, got_ids = ref_moe.grouped_topk_canonical(got, *args)
    exp_w, exp_ids = ref_moe.grouped_topk_canonical(ref_moe.grouped_topk(*args), *args)
    assert torch.equal(got_ids, exp_ids)
    torch.testing.assert_close(got_w, exp_w)


def test_grouped_topk_of_no_tokens(own_kernels):
    weights, ids = routing.grouped_topk(torch.empty(0, 64), 4, 2, 4, True, 1.0, torch.zeros(64))
    assert weights.shape == ids.shape == (0, 4)
    assert "grouped_topk_kernel" not in own_kernels


@needs_interpreter_loops
def test_alignment_of_a_decode_step_runs_the_one_program_kernel(own_kernels):
    topk_ids = torch.randint(0, 128, (4, 8), dtype=torch.int32)
    n_sorted = topk_ids.numel() + 128 * 15
    got = [torch.empty(n, dtype=torch.int32) for n in (n_sorted, -(-n_sorted // 16), 1)]
    expected = [t.clone() for t in got]
    routing.moe_align_block_size(topk_ids, 128, 16, *got)
    assert own_kernels["align_pairs_kernel"].launches == 1
    ref_moe.moe_align_block_size(topk_ids, 128, 16, *expected)
    for g, e in zip(got, expected):
        assert torch.equal(g, e)


def _rope_layer(head: int, rotary_dim: int, neox: bool, positions_max: int = 512):
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, rotary_dim, 2).float() / rotary_dim))
    freqs = torch.outer(torch.arange(positions_max).float(), inv_freq)
    return types.SimpleNamespace(
        cos_sin_cache=torch.cat((freqs.cos(), freqs.sin()), dim=-1),
        head_size=head,
        rotary_dim=rotary_dim,
        is_neox_style=neox,
    )


def _rotate(function, layer, positions, query, key):
    """``function`` (``rotary.rotary_embedding`` or its in-place variant) with the layer's state."""
    state = (layer.cos_sin_cache, layer.head_size, layer.rotary_dim, layer.is_neox_style)
    return function(positions, query, key, *state)


@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("rotary_dim", [64, 32])
def test_rotary_inplace_runs_the_heads_spread_kernel_on_qkv_views(own_kernels, neox, rotary_dim):
    head, positions_max = 64, 512
    layer = _rope_layer(head, rotary_dim, neox, positions_max)
    qkv = torch.randn(5, (4 + 2 + 2) * head)
    query, key, value = qkv.split([4 * head, 2 * head, 2 * head], dim=-1)
    positions = torch.randint(0, positions_max, (5,))
    expected = ref_rotary.rotary_embedding(layer, positions, query.clone(), key.clone())
    value_before = value.clone()
    got = _rotate(rotary.rotary_embedding_inplace, layer, positions, query, key)
    assert own_kernels["rotary_kernel"].launches == 1
    assert got[0] is query and got[1] is key
    torch.testing.assert_close(query, expected[0])
    torch.testing.assert_close(key, expected[1])
    assert torch.equal(value, value_before)


def test_rotary_calls_of_one_layout_launch_what_the_first_bound(own_kernels):
    layer = _rope_layer(64, 32, True)
    calls = []
    for tokens in (5, 5, 3):  # the third has a layout of its own
        qkv = torch.randn(tokens, (4 + 2 + 2) * 64)
        query, key, _ = qkv.split([4 * 64, 2 * 64, 2 * 64], dim=-1)
        positions = torch.randint(0, 512, (tokens,))
        expected = ref_rotary.rotary_embedding(layer, positions, query.clone(), key.clone())
        _rotate(rotary.rotary_embedding_inplace, layer, positions, query, key)
        calls.append(own_kernels["rotary_kernel"].bound_launches)
        torch.testing.assert_close(query, expected[0])
        torch.testing.assert_close(key, expected[1])
    assert calls == [0, 1, 1]
    got = _rotate(rotary.rotary_embedding, layer, positions, query, key)  # functional: its own
    assert own_kernels["rotary_kernel"].bound_launches == 1
    expected = ref_rotary.rotary_embedding(layer, positions, query, key)
    torch.testing.assert_close(got[0], expected[0])


@pytest.mark.parametrize("with_key", [True, False], ids=["key", "no-key"])
def test_rotary_functional_writes_new_tensors_in_one_launch(own_kernels, with_key):
    layer = _rope_layer(64, 32, True)
    qkv = torch.randn(5, (4 + 2 + 2) * 64)
    query, key, _ = qkv.split([4 * 64, 2 * 64, 2 * 64], dim=-1)
    key = key if with_key else None
    positions = torch.randint(0, 512, (5,))
    before = qkv.clone()
    got = _rotate(rotary.rotary_embedding, layer, positions, query, key)
    assert own_kernels["rotary_kernel"].launches == 1
    assert torch.equal(qkv, before), "the functional op changed its inputs"
    expected = ref_rotary.rotary_embedding(layer, positions, query, key)
    torch.testing.assert_close(got[0], expected[0])
    if with_key:
        torch.testing.assert_close(got[1], expected[1])
    else:
        assert got[1] is None


def _fused_moe_kernel(folder):
    """vLLM's ``fused_moe_kernel``, the kernel FlagGems' is ported from, with the same parameters
    (vLLM's CPU build defines it under a Triton stand-in: it is rebuilt here with Triton)."""
    import ast
    import importlib.util
    import inspect

    from vllm.model_executor.layers.fused_moe import fused_moe as vllm_fused_moe

    source = inspect.getsource(vllm_fused_moe)
    wanted = {"write_zeros_to_output", "fused_moe_kernel"}
    lines = source.splitlines()
    parts = ["import triton", "import triton.language as tl", ""]
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name in wanted:
            first = min(d.lineno for d in node.decorator_list)
            parts += lines[first - 1 : node.end_lineno] + [""]
    path = folder / "vllm_fused_moe_kernel.py"
    path.write_text("\n".join(parts))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.fused_moe_kernel


#: a small tiling the interpreter runs quickly (tl.dot needs 16 or more per side)
CONFIG = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 1}


@needs_interpreter_loops
@pytest.mark.parametrize(
    ("tokens", "on_input"),
    [(1, False), (5, False), (5, True)],
    ids=["sparse-pairs-unaligned", "aligned", "weights-on-input"],
)
def test_fused_experts_sequence_on_the_gemm_kernel(own_kernels, tmp_path, tokens, on_input):
    """The orchestration of ``experts``: config, alignment (the library's kernel), both GEMMs
    with FlagGems' launch arguments, activation and sum, against the reference."""
    pytest.importorskip("vllm.model_executor.layers.fused_moe.fused_moe")
    from vllm_fl.kernels.moe import experts
    from vllm_fl.backends.reference.impl import activation as ref_activation

    kernel = _fused_moe_kernel(tmp_path)
    gemm = _Interpreted(kernel)
    key = tuple(sorted(CONFIG.items()))
    kernels = experts.ExpertKernels(
        gemm, tuple(p.name for p in kernel.params), lambda *shape: (CONFIG, key)
    )
    gen = torch.Generator().manual_seed(5)
    num_experts, hidden, inter, top_k = 8, 32, 32, 2
    x = torch.randn(tokens, hidden, generator=gen)
    w1 = torch.randn(num_experts, 2 * inter, hidden, generator=gen) / hidden**0.5
    w2 = torch.randn(num_experts, hidden, inter, generator=gen) / inter**0.5
    topk_ids = torch.stack(
        [torch.randperm(num_experts, generator=gen)[:top_k] for _ in range(tokens)]
    ).to(torch.int32)
    topk_weights = torch.rand(tokens, top_k, generator=gen)
    got = experts.fused_experts_in_plans(
        kernels,
        x,
        w1,
        w2,
        topk_weights,
        topk_ids,
        on_input,
        -1,
        align=routing.moe_align_block_size,
        activate=lambda gate_up: ref_activation.silu_and_mul(None, gate_up),
        reduce=ref_moe.moe_sum,
    )
    assert got is not None and gemm.launches == 2
    sparse = tokens * top_k * experts.SPARSITY_FACTOR <= num_experts
    assert ("align_pairs_kernel" in own_kernels) is not sparse
    expected = ref_moe.fused_experts(
        x, w1, w2, topk_weights, topk_ids, apply_router_weight_on_input=on_input
    )
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_fused_experts_leaves_other_kernels_to_flag_gems():
    from vllm_fl.kernels.moe import experts

    other = experts.ExpertKernels(None, ("a_ptr", "b_ptr"), lambda *shape: (CONFIG, ()))
    x, w1, w2 = torch.randn(2, 32), torch.randn(8, 64, 32), torch.randn(8, 32, 32)
    ids, weights = torch.zeros(2, 2, dtype=torch.int32), torch.ones(2, 2)
    no_steps = dict(align=None, activate=None, reduce=None)
    assert (
        experts.fused_experts_in_plans(other, x, w1, w2, weights, ids, False, -1, **no_steps)
        is None
    )


@pytest.mark.parametrize("op", ["rms_norm", "gemma_rms_norm"])
@pytest.mark.parametrize("shape", [(5, 96), (2, 3, 64)], ids=["2d", "3d"])
def test_functional_norm_with_residual_is_one_launch(own_kernels, monkeypatch, op, shape):
    """Gemma's takes it where FlagGems has no gemma_rms_norm (5.0.2 has none)."""
    import sys

    from vllm_fl.backends.reference.impl import normalization as ref_norm

    monkeypatch.setitem(sys.modules, "flag_gems", types.ModuleType("flag_gems"))
    hidden = shape[-1]
    layer = types.SimpleNamespace(
        weight=torch.nn.Parameter(torch.randn(hidden) * 0.1 + 1.0), variance_epsilon=1e-6
    )
    x, residual = torch.randn(shape), torch.randn(shape)
    before = (x.clone(), residual.clone())
    weight, eps = layer.weight, layer.variance_epsilon
    if op == "rms_norm":
        out, total = norm.add_rms_norm(x, residual, weight.data, eps)
    else:
        out, total = norm.gemma_rms_norm(layer, x, residual, weight, eps)
    assert own_kernels["add_rms_norm_kernel"].launches == 1
    assert torch.equal(x, before[0]) and torch.equal(residual, before[1])
    expected_out, expected_total = getattr(ref_norm, op)(layer, x, residual)
    torch.testing.assert_close(total, expected_total)
    torch.testing.assert_close(out, expected_out, atol=1e-5, rtol=1e-5)


def test_per_head_norm_on_qkv_views_runs_the_rows_kernel(own_kernels, monkeypatch):
    """Qwen3's q_norm: a [tokens, heads, head_size] view of the qkv rows, normalised into a new
    contiguous tensor without a copy first; the second call of the layout is the bound launch."""
    import sys

    from vllm_fl.backends.reference.impl import normalization as ref_norm

    monkeypatch.setitem(sys.modules, "flag_gems", types.ModuleType("flag_gems"))
    layer = types.SimpleNamespace(
        weight=torch.nn.Parameter(torch.randn(64) * 0.1 + 1.0), variance_epsilon=1e-6
    )
    for tokens in (3, 3):
        qkv = torch.randn(tokens, (4 + 2 * 2) * 64)
        q_by_head = qkv[:, : 4 * 64].view(tokens, 4, 64)
        before = qkv.clone()
        got = norm.rms_norm(q_by_head, layer.weight.data, layer.variance_epsilon)
        assert got.is_contiguous() and got.shape == q_by_head.shape
        assert torch.equal(qkv, before)
        expected = ref_norm.rms_norm(layer, q_by_head)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    rows = own_kernels["rms_norm_rows_kernel"]
    assert rows.launches == 2 and rows.bound_launches == 1

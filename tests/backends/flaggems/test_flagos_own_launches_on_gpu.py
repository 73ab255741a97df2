"""The flagos backend's own launches on a GPU with the real FlagGems, at model sizes and at the
edges of what each takes, beyond the generated parity tests' small cases: the rotary eager
variant on Llama-3-8B's qkv views, Qwen3's per-head norms on its qkv views, top-k softmax at
Qwen3-MoE's and DeepSeek-V3's widths, the one-program alignment at its pair limit and one pair
past it (FlagGems' staged kernels), grouped top-k with DeepSeek-V3's routing, and fused experts
at Qwen3-MoE's sizes on both of its alignment paths, each against the reference impl with the
manifest's tolerances.

Marked ``gpu``: skipped without an NVIDIA GPU or flag_gems; `make test-gpu` runs it.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from tests.support.ops_helpers import cos_sin_cache, op_tolerance

from vllm_fl.backends.flaggems.impl import moe as flagos_moe
from vllm_fl.backends.flaggems.impl import normalization as flagos_norm
from vllm_fl.backends.flaggems.impl import rotary as flagos_rotary
from vllm_fl.backends.reference.impl import moe as ref_moe
from vllm_fl.backends.reference.impl import normalization as ref_norm
from vllm_fl.backends.reference.impl import rotary as ref_rotary
from vllm_fl.kernels import launch, routing_kernels

pytestmark = pytest.mark.gpu("flag_gems")

DEVICE = "cuda"


@pytest.mark.parametrize("tokens", [1, 300])
@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
def test_rotary_eager_variant_on_llama_qkv_views(tokens, neox):
    head, q_heads, kv_heads = 128, 32, 8
    layer = SimpleNamespace(
        cos_sin_cache=cos_sin_cache(8192, head).to(DEVICE),
        head_size=head,
        rotary_dim=head,
        is_neox_style=neox,
    )
    qkv = torch.randn(tokens, (q_heads + 2 * kv_heads) * head, dtype=torch.bfloat16, device=DEVICE)
    query, key, value = qkv.split([q_heads * head, kv_heads * head, kv_heads * head], dim=-1)
    positions = torch.randint(0, 8192, (tokens,), device=DEVICE)
    expected = ref_rotary.rotary_embedding(layer, positions, query.clone(), key.clone())
    value_before = value.clone()
    for _ in range(2):  # the second call runs on the launch plan
        rotated = [t.clone() for t in (query, key)]
        got = flagos_rotary.rotary_embedding_inplace(layer, positions, *rotated)
        assert got[0] is rotated[0] and got[1] is rotated[1]
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e, **op_tolerance("rotary_embedding", torch.bfloat16))
    assert torch.equal(value, value_before)


@pytest.mark.parametrize("tokens", [1, 300])
def test_per_head_norms_on_qwen3_qkv_views(tokens):
    """Qwen3-MoE's q_norm and k_norm: [tokens, heads, 128] views of the qkv projection's rows,
    through the eager variant as vLLM calls it (no residual: the kernel library's rows kernel)."""
    head, q_heads, kv_heads = 128, 32, 4
    qkv = torch.randn(tokens, (q_heads + 2 * kv_heads) * head, dtype=torch.bfloat16, device=DEVICE)
    q, k, _v = qkv.split([q_heads * head, kv_heads * head, kv_heads * head], dim=-1)
    before = qkv.clone()
    for heads, view in ((q_heads, q), (kv_heads, k)):
        by_head = view.view(tokens, heads, head)
        layer = SimpleNamespace(
            weight=torch.nn.Parameter(
                torch.randn(head, device=DEVICE, dtype=torch.bfloat16) * 0.1 + 1.0
            ),
            variance_epsilon=1e-6,
        )
        expected = ref_norm.rms_norm(layer, by_head)
        for _ in range(2):  # the second call runs on the bound launch
            got = flagos_norm.rms_norm_inplace(layer, by_head)
            assert got.is_contiguous() and got.shape == by_head.shape
            torch.testing.assert_close(got, expected, **op_tolerance("rms_norm", torch.bfloat16))
    assert torch.equal(qkv, before)


@pytest.mark.parametrize(
    "pairs", [routing_kernels.ALIGN_MAX_PAIRS, routing_kernels.ALIGN_MAX_PAIRS + 8]
)
def test_alignment_at_and_past_the_one_program_limit(pairs):
    experts, block = 128, 16
    topk_ids = torch.randint(0, experts, (pairs // 8, 8), dtype=torch.int32, device=DEVICE)
    padded = pairs + experts * (block - 1)
    buffers = [
        torch.empty(n, dtype=torch.int32, device=DEVICE) for n in (padded, -(-padded // block), 1)
    ]
    expected = [torch.empty_like(b) for b in buffers]
    ref_moe.moe_align_block_size(topk_ids, experts, block, *expected)
    for _ in range(2):
        flagos_moe.moe_align_block_size(topk_ids, experts, block, *buffers)
        got = ref_moe.moe_align_block_size_canonical(topk_ids, experts, block, *buffers)
        want = ref_moe.moe_align_block_size_canonical(topk_ids, experts, block, *expected)
        for g, w in zip(got, want):
            assert torch.equal(g, w)


@pytest.mark.parametrize("tokens", [1, 2048])
def test_grouped_topk_with_deepseek_routing(tokens):
    scores = torch.randn(tokens, 256, device=DEVICE)
    bias = torch.randn(256, device=DEVICE) * 0.1
    args = (scores, 8, 4, 8, True, 2.5, bias, 1)
    expected = ref_moe.grouped_topk_canonical(ref_moe.grouped_topk(*args), *args)
    for _ in range(2):
        got = ref_moe.grouped_topk_canonical(flagos_moe.grouped_topk(*args), *args)
        assert torch.equal(got[1], expected[1])
        torch.testing.assert_close(
            got[0], expected[0], **op_tolerance("grouped_topk", torch.float32)
        )


@pytest.mark.parametrize("tokens", [1, 16, 300])
@pytest.mark.parametrize("experts", [128, 256])
@pytest.mark.parametrize("renormalize", [True, False])
def test_topk_softmax_at_qwen3_and_deepseek_widths(tokens, experts, renormalize):
    """128 experts: eight rows per program, four warps; 256: one row, one warp (FlagGems'
    choices); 1 and 16 tokens are Triton specialisations of their own, 300 is not."""
    logits = torch.randn(tokens, experts, dtype=torch.bfloat16, device=DEVICE)

    def buffers():
        return [
            torch.empty(tokens, 8, dtype=dtype, device=DEVICE)
            for dtype in (torch.float32, torch.int32, torch.int32)
        ]

    expected = buffers()
    ref_moe.topk_softmax(*expected, logits, renormalize)
    want = ref_moe.topk_softmax_canonical(*expected, logits, renormalize)
    for _ in range(2):  # the second call runs on the launch plan
        got = buffers()
        flagos_moe.topk_softmax(*got, logits, renormalize)
        got = ref_moe.topk_softmax_canonical(*got, logits, renormalize)
        tolerance = op_tolerance("topk_softmax", torch.bfloat16)
        torch.testing.assert_close(got[0], want[0], **tolerance)
        assert torch.equal(got[1], want[1]) and torch.equal(got[2], want[2])


@pytest.mark.parametrize("tokens", [1, 8, 64])
def test_fused_experts_at_qwen3_moe_sizes(tokens):
    """1 token takes the sparse path (no alignment), 8 the one-program alignment, 64 the staged."""
    experts, hidden, inter, top_k = 128, 2048, 768, 8
    gen = torch.Generator(device=DEVICE).manual_seed(tokens)
    x = torch.randn(tokens, hidden, device=DEVICE, generator=gen, dtype=torch.bfloat16)
    w1 = torch.randn(experts, 2 * inter, hidden, device=DEVICE, generator=gen) / hidden**0.5
    w2 = torch.randn(experts, hidden, inter, device=DEVICE, generator=gen) / inter**0.5
    w1, w2 = w1.to(torch.bfloat16), w2.to(torch.bfloat16)
    topk_ids = torch.stack(
        [torch.randperm(experts, device=DEVICE, generator=gen)[:top_k] for _ in range(tokens)]
    ).to(torch.int32)
    topk_weights = torch.rand(tokens, top_k, device=DEVICE, generator=gen)
    args = (x, w1, w2, topk_weights, topk_ids)
    expected = ref_moe.fused_experts(*args)
    for _ in range(2):
        got = flagos_moe.fused_experts(*args)
        torch.testing.assert_close(got, expected, **op_tolerance("fused_experts", torch.bfloat16))


def test_bound_launches_call_tritons_c_launcher_and_a_launch_hook_still_sees_them():
    """On the Triton release whose C launcher ``vllm_fl.kernels.launch`` calls directly, the
    add-and-normalise eager variant's bound launch is that direct call; with a launch hook registered (as a
    profiler registers one) the launch goes through Triton's runner, which calls the hook."""
    from triton import knobs

    hidden = 4096
    layer = SimpleNamespace(
        weight=torch.nn.Parameter(torch.randn(hidden, dtype=torch.bfloat16, device=DEVICE)),
        variance_epsilon=1e-6,
    )
    x, residual = (torch.randn(7, hidden, dtype=torch.bfloat16, device=DEVICE) for _ in range(2))
    expected = ref_norm.rms_norm(layer, x.clone(), residual.clone())
    tolerance = op_tolerance("rms_norm", torch.bfloat16)
    seen: list[str] = []

    def record(metadata) -> None:
        seen.append(metadata.get()["name"])  # Triton passes a LazyDict

    hook = knobs.runtime.launch_enter_hook
    for call in range(3):
        if call == 2:
            hook.add(record)
        try:
            got = flagos_norm.rms_norm_inplace(layer, x.clone(), residual.clone())
        finally:
            hook.remove(record)
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e, **tolerance)
    plans = launch.plans_of("fused_add_rms_norm", "fused_add_rms_norm_kernel")
    (runner, _fixed), *_ = plans._bound.values()
    direct = launch._triton_version() in launch._DIRECT_TRITON
    assert (runner.func.__name__ == "launch") == direct
    assert seen == ["fused_add_rms_norm_kernel"]


def test_fused_experts_with_every_tuned_config_of_this_device():
    """Each config of the kernel library's tuned tables for this GPU (``tuned_configs``), at the
    token count it was tuned for, is the one the impl takes and computes what the reference
    does."""
    from vllm_fl.kernels.moe import experts as flagos_experts
    from vllm_fl.kernels.moe import tuned_configs

    device = tuned_configs.device_name(torch.device(DEVICE))
    tables = sorted(tuned_configs.TABLE_DIR.glob(f"*,device_name={device},dtype=bfloat16.json"))
    if not tables:
        pytest.skip(f"the kernel library has no tuned bf16 table for {device}")
    hidden, top_k = 1024, 8
    kernels = flagos_experts.flag_gems_kernels()
    for path in tables:
        fields = dict(part.split("=", 1) for part in path.stem.split(","))
        experts, inter = int(fields["E"]), int(fields["N"])
        gen = torch.Generator(device=DEVICE).manual_seed(experts)
        w1 = torch.randn(experts, 2 * inter, hidden, device=DEVICE, generator=gen) / hidden**0.5
        w2 = torch.randn(experts, hidden, inter, device=DEVICE, generator=gen) / inter**0.5
        w1, w2 = w1.to(torch.bfloat16), w2.to(torch.bfloat16)
        for tokens, config in tuned_configs.parse_table(path, path.read_text()).items():
            assert kernels.config(w1, w2, top_k, torch.bfloat16, tokens)[0] == config
            x = torch.randn(tokens, hidden, device=DEVICE, generator=gen, dtype=torch.bfloat16)
            scores = torch.rand(tokens, experts, device=DEVICE, generator=gen)
            topk_weights, topk_ids = torch.topk(scores, top_k)
            args = (x, w1, w2, topk_weights, topk_ids.to(torch.int32))
            got = flagos_moe.fused_experts(*args)
            torch.testing.assert_close(
                got,
                ref_moe.fused_experts(*args),
                **op_tolerance("fused_experts", torch.bfloat16),
                msg=lambda text: f"{path.name} [{tokens}]: {text}",
            )

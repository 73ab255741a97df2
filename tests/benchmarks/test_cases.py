"""The benchmarks' inputs come from ops.yaml's test cases, scaled to model sizes
(benchmarks.shapes)."""

from __future__ import annotations

from benchmarks import cases
import pytest
from benchmarks import shapes
from vllm_fl.testing import models
import torch
from benchmarks.cases import BenchShapeError, TensorSpec, bench_cases
from codegen.manifest import load_manifest

from vllm_fl.dispatch import get_default_manager

MANIFEST_OPS = [op.name for op in cases.manifest().ops]
TESTED_OPS = [
    op.name for op in cases.manifest().ops if op.tests is not None and op.collective is None
]


def _shapes(case, tokens: int) -> dict[str, tuple[int, ...]]:
    return {n: v.shape for n, v in case.inputs(tokens).items() if isinstance(v, TensorSpec)}


def test_every_op_with_test_cases_has_a_benchmark_case():
    for op in TESTED_OPS:
        assert bench_cases(op), op
    assert bench_cases("attention_backend") == []  # no test cases in ops.yaml
    assert bench_cases("no_such_op") == []
    assert bench_cases("all_reduce") == []  # a collective: not one process's to run


def test_a_case_giving_values_runs_at_its_own_size_only():
    case = bench_cases("paged_attention")[0]
    assert case.fixed_tokens == 22  # the query's tokens, which query_start_loc's values count
    assert case.inputs(22)["seq_lens"].values == (45, 20, 7, 64)
    with pytest.raises(BenchShapeError, match="runs at its own 22 token"):
        case.inputs(64)
    assert bench_cases("rms_norm")[0].fixed_tokens is None


def test_op_sizes_name_only_manifest_ops():
    assert set(shapes.OP_SIZES) <= set(MANIFEST_OPS)


def test_cases_are_named_after_the_arguments_they_add_or_leave_out():
    assert [c.name for c in bench_cases("rms_norm")] == ["rms_norm", "rms_norm+residual"]
    assert [c.name for c in bench_cases("rotary_embedding")] == ["rotary_embedding"]
    # a quantized input's zero points (azp) are an argument the case adds
    assert [c.name for c in bench_cases("int8_scaled_mm")] == [
        "int8_scaled_mm",
        "int8_scaled_mm+bias+azp_adj+azp",
    ]


def test_dense_ops_run_at_llama3_8b_sizes():
    llama = models.model_shape("llama3-8b")
    assert (llama.hidden, llama.intermediate, llama.heads, llama.kv_heads, llama.head_dim) == (
        4096,
        14336,
        32,
        8,
        128,
    )
    assert _shapes(bench_cases("silu_and_mul")[0], 2048) == {"x": (2048, 2 * 14336)}
    assert _shapes(bench_cases("gelu_new")[0], 8) == {"x": (8, 14336)}
    norm = bench_cases("rms_norm")[1]
    assert _shapes(norm, 64) == {"x": (64, 4096), "residual": (64, 4096)}
    assert norm.init()["hidden_size"] == 4096
    rope = bench_cases("rotary_embedding")[0]
    assert _shapes(rope, 256) == {"positions": (256,), "query": (256, 4096), "key": (256, 1024)}
    assert rope.inputs(256)["positions"].high == 8192
    init = rope.init()
    assert (init["head_size"], init["max_position_embeddings"], init["base"]) == (128, 8192, 5e5)
    assert bench_cases("gelu_and_mul")[0].init() == {"approximate": "tanh"}


def test_moe_ops_run_at_the_e2e_moe_shape():
    qwen = models.model_shape("qwen3-moe")
    assert models.model_config("qwen3-moe", layers=16)["num_hidden_layers"] == 16
    experts = bench_cases("fused_experts")[0]
    assert _shapes(experts, 64) == {
        "hidden_states": (64, qwen.hidden),
        "w1": (qwen.experts, 2 * qwen.moe_intermediate, qwen.hidden),
        "w2": (qwen.experts, qwen.hidden, qwen.moe_intermediate),
        "topk_weights": (64, qwen.top_k),
        "topk_ids": (64, qwen.top_k),
    }
    assert experts.inputs(64)["topk_ids"].high == qwen.experts
    align = bench_cases("moe_align_block_size")[0]
    # vLLM's allocation: pairs + experts * (block - 1), capped at pairs * block for few pairs
    assert align.inputs(2048)["sorted_token_ids"].shape == (2048 * 8 + 128 * 63,)
    assert align.inputs(1)["sorted_token_ids"].shape == (8 * 64,)
    assert align.inputs(2048)["experts_ids"].shape == (-(-(2048 * 8 + 128 * 63) // 64),)
    assert align.inputs(2048)["num_experts"] == qwen.experts
    # grouped_topk keeps its test case's sizes (DeepSeek-V3's routing), tokens scaled
    topk = bench_cases("grouped_topk")[0]
    assert topk.model is None and _shapes(topk, 32) == {"scores": (32, 256), "bias": (256,)}


def test_quantized_inputs_keep_their_test_sizes_with_tokens_scaled():
    a, b, scale_a, scale_b, out_dtype = (
        bench_cases("int8_scaled_mm")[0].build(5, torch.bfloat16, "cpu").args
    )
    assert (a.shape, a.dtype, scale_a.shape) == ((5, 128), torch.int8, (5, 1))
    # the weight [N, K] quantised per output channel and passed as vLLM's [K, N] view
    assert (b.shape, b.stride(), b.dtype, scale_b.shape) == (
        (128, 64),
        (1, 128),
        torch.int8,
        (64, 1),
    )
    assert out_dtype == "bfloat16"


def test_quantized_inputs_scale_where_op_sizes_says_so(monkeypatch):
    monkeypatch.setattr(models, "MODELS", SMALL)
    monkeypatch.setitem(
        shapes.OP_SIZES,
        "int8_scaled_mm",
        shapes.OpSizes(
            "llama3-8b", {128: shapes.size("hidden"), 64: shapes.size("intermediate")}, cases=(0,)
        ),
    )
    (case,) = bench_cases("int8_scaled_mm")
    assert case.inputs(4)["b"].shape == (96, 64)  # the quantised shape, before the transpose
    call = case.build(4, torch.bfloat16, "cpu")
    a, b, scale_a, scale_b, _ = call.args
    assert (a.shape, scale_a.shape, b.shape, scale_b.shape) == ((4, 64), (4, 1), (64, 96), (96, 1))
    reference = get_default_manager().registry.get_implementations("int8_scaled_mm")
    fn = next(i.fn for i in reference if i.impl_id.startswith("reference."))
    assert call.bind(fn)().shape == (4, 96)


def test_a_derived_input_is_computed_from_the_inputs_at_the_benchmarks_size():
    case = next(c for c in bench_cases("scaled_int8_quant") if c.name == "scaled_int8_quant+scale")
    x, scale = case.build(9, torch.float32, "cpu").args
    assert x.shape == (9, 128)
    torch.testing.assert_close(scale, (x.abs().amax() / 127).reshape(1))


def _manifest_with(extra: str):
    text = cases.MANIFEST.read_text()
    assert text.rstrip().splitlines()[-1].startswith(" "), "ops: must be the last section"
    return load_manifest(text + extra, "ops.yaml")


NEW_OP = """
  swish_gate:
    signature: swish_gate(Tensor x, Tensor gate) -> Tensor
    doc: x * silu(gate).
    impls:
      reference: activation.swish_gate
    tests:
      dtypes: [float32]
      cases:
        - inputs: {x: [5, 96], gate: [5, 96]}
"""


def test_a_new_op_in_the_manifest_is_benchmarked_at_its_test_sizes(monkeypatch):
    monkeypatch.setattr(cases, "manifest", lambda: _manifest_with(NEW_OP))
    (case,) = bench_cases("swish_gate")
    assert case.name == "swish_gate" and case.layer is None
    assert _shapes(case, 300) == {"x": (300, 96), "gate": (300, 96)}


def test_a_size_the_test_case_lacks_names_the_table_and_the_case(monkeypatch):
    monkeypatch.setitem(
        shapes.OP_SIZES, "silu_and_mul", shapes.OpSizes("llama3-8b", {512: shapes.size("hidden")})
    )
    with pytest.raises(
        BenchShapeError, match=r"OP_SIZES\['silu_and_mul'\]: 512 not in .*ops.yaml:"
    ):
        bench_cases("silu_and_mul")


def test_a_case_index_out_of_range_is_refused(monkeypatch):
    monkeypatch.setitem(shapes.OP_SIZES, "moe_sum", shapes.OpSizes("qwen3-moe", {}, cases=(9,)))
    with pytest.raises(BenchShapeError, match=r"cases: \[9\] out of range.*indices 0 to 2"):
        bench_cases("moe_sum")


SMALL = {
    "llama3-8b": {
        **models.LLAMA3_8B,
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 128,
    },
    "qwen3-moe": {
        **models.QWEN3_MOE,
        "hidden_size": 64,
        "moe_intermediate_size": 32,
        "num_experts": 16,
        "num_experts_per_tok": 4,
        "head_dim": 16,
    },
}


@pytest.mark.parametrize("op", TESTED_OPS)
def test_built_inputs_run_the_reference_impl(op, monkeypatch):
    """Every case's layer and arguments (at small model sizes) are what the op's impls take."""
    monkeypatch.setattr(models, "MODELS", SMALL)
    reference = next(
        i
        for i in get_default_manager().registry.get_implementations(op)
        if i.impl_id.startswith("reference.")
    )
    for case in bench_cases(op):
        tokens = case.fixed_tokens or 3  # a case giving values runs at its own size only
        call = case.build(tokens, torch.float32, "cpu")
        again = case.build(tokens, torch.float32, "cpu")
        for a, b in zip(call.values(), again.values()):
            if isinstance(a, torch.Tensor):
                assert torch.equal(a, b), "inputs are drawn from a seeded generator"
        assert (call.layer is None) == (case.layer is None)
        out = call.bind(reference.fn)()
        first = out[0] if isinstance(out, tuple) else out
        if first is not None:
            assert first.shape[0] == tokens, (case.name, first.shape)

"""bench_layers measures every op of ops.yaml that has a layer, on our class of that layer."""

from __future__ import annotations

from benchmarks import bench_layers
import pytest
from benchmarks.cases import manifest


def test_every_layer_op_is_measured_on_its_out_of_tree_class():
    found = bench_layers.layer_cases()
    layer_ops = {op.name for op in manifest().ops if op.layer is not None and op.tests}
    assert {case.op for case, _ in found} == layer_ops
    labels = {bench_layers.label(case): path for case, path in found}
    assert labels["RMSNorm+residual"] == "vllm_fl.ops.layernorm.RMSNormFL"
    assert labels["RotaryEmbedding"] == "vllm_fl.ops.rotary_embedding.RotaryEmbeddingFL"


def test_an_op_without_a_layer_is_refused(capsys):
    with pytest.raises(SystemExit):
        bench_layers.main(["--ops", "moe_sum"])
    assert "--ops: moe_sum not an op with a layer in ops.yaml" in capsys.readouterr().err

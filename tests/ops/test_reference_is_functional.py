"""Reference impls never modify their inputs or the layer's attributes, never return (views of)
them, and read nothing of the calling layer but the attributes ops.yaml declares (``reads``).

Every op of ops.yaml with a reference impl and test cases, on each case and dtype; an op whose
layer reads a ``weight`` also with a float32 weight under half-precision inputs, as vLLM keeps
some weights.
"""

from types import SimpleNamespace

import pytest
import torch
from ops_helpers import (
    assert_fresh,
    case_inputs,
    case_layer,
    reference_cases,
    reference_fn,
    unchanged,
)


def _reads_weight(op) -> bool:
    return any(attr.name == "weight" for attr in op.reads)


CASES = list(reference_cases())
FLOAT32_WEIGHT = [p for p in reference_cases(_reads_weight) if p.values[2] != torch.float32]


def _run(op, case, dtype, weight_dtype=None):
    inputs = case_inputs(case, dtype)
    attrs = None
    if op.layer is not None:
        layer = case_layer(op, case, dtype)
        # only what ops.yaml says the impls read: anything else is an AttributeError
        attrs = SimpleNamespace(**{a.name: getattr(layer, a.name) for a in op.reads})
        if weight_dtype is not None:
            attrs.weight = attrs.weight.detach().to(weight_dtype)
    read = dict(vars(attrs)) if attrs is not None else {}
    kept = [v for k, v in inputs.items() if isinstance(v, torch.Tensor) and k not in op.mutates]
    read_tensors = [v for v in read.values() if isinstance(v, torch.Tensor)]
    fn = reference_fn(op)
    with unchanged(*kept, *read_tensors):
        out = fn(attrs, **inputs) if attrs is not None else fn(**inputs)
    if op.mutates:
        assert out is None
    else:
        tensors = [v for v in inputs.values() if isinstance(v, torch.Tensor)]
        assert_fresh(out, *tensors, *read_tensors)
    assert all(getattr(attrs, name) is value for name, value in read.items()), "layer changed"


@pytest.mark.parametrize("op, case, dtype", CASES)
def test_reference_is_functional(vllm_config, op, case, dtype):
    _run(op, case, dtype)


@pytest.mark.parametrize("op, case, dtype", FLOAT32_WEIGHT)
def test_reference_is_functional_with_a_float32_weight(vllm_config, op, case, dtype):
    _run(op, case, dtype, weight_dtype=torch.float32)

"""One sample per test case of every replaced layer (float32) and of every function op, from
ops.yaml's test cases.

Shared by the torch.compile and opcheck tests. `samples()` covers every in-tree class in
`vllm_fl.ops.OOT_CLASSES`; a layer op without test cases in ops.yaml makes those tests fail,
naming it. `function_samples()` gives the test cases of the ops without a layer, with the
floating-point dtype to make them in.
"""

from __future__ import annotations

from dataclasses import asdict

import torch

from codegen import model as m
from codegen.manifest import project_manifest


def make_inputs(spec: dict, seed: int = 0, dtype: torch.dtype = torch.float32) -> dict:
    """Forward arguments for a case's inputs (ops.yaml), floating-point tensors in ``dtype``
    where the case leaves their dtype to the test (``$dtype``); a quantized input quantised with
    its scheme (its scales and zero points set the arguments it names), a derived one computed
    from the others, as the generated parity tests build them."""
    from vllm_fl.testing.inputs import derived_input, quantized_input

    gen = torch.Generator().manual_seed(seed)
    out = {}
    derived = {}
    for name, item in spec.items():
        if isinstance(item, m.LiteralInput):
            out[name] = item.value
        elif isinstance(item, m.DerivedInput):
            derived[name] = item
        elif isinstance(item, m.QuantizedInput):
            out.update(quantized_input(name, generator=gen, **asdict(item))[1])
        elif isinstance(item, m.TensorInput) and item.values is not None:
            given = dtype if item.dtype == m.DTYPE_PLACEHOLDER else getattr(torch, item.dtype)
            out[name] = torch.tensor(item.values, dtype=given)
        elif item.is_int:
            ints = getattr(torch, item.dtype)
            out[name] = torch.randint(0, item.high, item.shape, generator=gen, dtype=ints)
        else:
            floats = dtype if item.dtype == m.DTYPE_PLACEHOLDER else getattr(torch, item.dtype)
            out[name] = (torch.randn(*item.shape, generator=gen) * (item.scale or 1.0)).to(floats)
    for name, item in derived.items():  # of the other arguments, as built
        out[name] = derived_input(item.module, item.function, out)
    return out


def make_layer(cls: type, kwargs: dict, seed: int = 0):
    """Construct `cls` and give its weights (if any) non-trivial values. vLLM's kernels are
    loaded first: some constructors (NewGELU, FastGELU, QuickGELU) look up torch.ops._C; and
    vLLM's one-process tensor-parallel state set up: some read the tensor-parallel size and rank
    (the Mamba2 mixer's norm). Needs a current vLLM config."""
    from vllm.platforms import current_platform

    from vllm_fl.distributed.single_process import init_single_process

    current_platform.import_kernels()
    init_single_process()
    layer = cls(**kwargs)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for param in layer.parameters():
            param.copy_(1.0 + 0.1 * torch.randn(param.shape, generator=gen))
    return layer


def installed(oot_classes: dict[str, str]) -> dict[str, str]:
    """The entries of `oot_classes` whose in-tree class the installed vLLM has as a CustomOp:
    ops.yaml's `layer_optional` layers are not in every supported release (vLLM 0.24 has no
    GELUTanh, and its LayerNorm is a plain module), and registration leaves them out there."""
    from vllm_fl.registration import _load_replacement

    return {
        name: target
        for name, target in oot_classes.items()
        if _load_replacement(name, target) is not None
    }


def samples(oot_classes: dict[str, str]):
    """(in-tree name, case id, ctor kwargs, input spec) for every class of `oot_classes`: the
    test cases its op declares in ops.yaml, with `$dtype` as float32."""
    manifest = project_manifest()
    by_class = {op.layer.cls: op for op in manifest.ops if op.layer is not None}
    missing = sorted(n for n in oot_classes if n not in by_class or by_class[n].tests is None)
    if missing:
        raise AssertionError(f"ops.yaml declares no test cases for the layers {missing}")
    for name in oot_classes:
        op = by_class[name]
        for index, case in enumerate(op.tests.cases):
            ctor = {k: torch.float32 if v == m.DTYPE_PLACEHOLDER else v for k, v in case.init}
            yield name, f"case{index}", ctor, dict(case.inputs)


def op_of(in_tree_name: str) -> str:
    """The op of ops.yaml whose layer is the in-tree class ``in_tree_name``: the name the
    dispatch knows it by, which need not be the name vLLM registered the class under."""
    for op in project_manifest().ops:
        if op.layer is not None and op.layer.cls == in_tree_name:
            return op.name
    raise AssertionError(f"no op of ops.yaml replaces {in_tree_name}")


def function_samples():
    """(op name, case id, input spec, dtype) for every test case of the ops without a layer
    but the collectives (which run on several processes): float32 where the op's tests declare
    it, else their first dtype (an op such as ``int8_scaled_mm`` takes its bias in the
    ``out_dtype`` its cases name)."""
    for op in project_manifest().ops:
        if op.layer is None and op.collective is None and op.tests is not None:
            name = "float32" if "float32" in op.tests.dtypes else op.tests.dtypes[0]
            for index, case in enumerate(op.tests.cases):
                yield op.name, f"case{index}", dict(case.inputs), getattr(torch, name)

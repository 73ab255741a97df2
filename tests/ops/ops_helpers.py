"""Helpers shared by the operator implementation tests (imported as ``ops_helpers``).

The per-op knowledge comes from ops.yaml: which ops there are, their reference impls, their test
cases, the dtypes and tolerances; the tests below iterate over it, so an op added to ops.yaml is
tested without touching them.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from pathlib import Path
from typing import Callable, Iterator

import pytest
import torch

from codegen import model as m
from codegen.manifest import load_manifest

ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def manifest() -> m.Manifest:
    return load_manifest((ROOT / "ops.yaml").read_text())


# The manifest's parity tolerances (ops.yaml's top level), per dtype.
TOLERANCES = {
    getattr(torch, dtype): dict(atol=tol.atol, rtol=tol.rtol)
    for dtype, tol in manifest().tolerances
}
DTYPES = list(TOLERANCES)


def op_tolerance(op_name: str, dtype: torch.dtype) -> dict[str, float]:
    """The parity tolerance of one op of ops.yaml at ``dtype`` (its own table, resolved by the
    manifest for every dtype the op's tests run in)."""
    op = next(o for o in manifest().ops if o.name == op_name)
    tol = dict(op.tests.tolerances)[str(dtype).rsplit(".", 1)[-1]]
    return {"atol": tol.atol, "rtol": tol.rtol}


def reference_fn(op: m.Op) -> Callable:
    """The reference backend's impl function of ``op``."""
    backend, impl = manifest().reference, manifest().reference_impl(op)
    assert backend is not None and impl is not None, f"{op.name} has no reference impl"
    return getattr(importlib.import_module(f"{backend.package}.impl.{impl.module}"), impl.function)


def reference_cases(select: Callable[[m.Op], bool] = lambda op: True) -> Iterator:
    """``pytest.param(op, case, dtype)`` for every test case x dtype of ops.yaml, of every op
    with a reference impl that ``select`` accepts."""
    for op in manifest().ops:
        if op.tests is None or manifest().reference_impl(op) is None or not select(op):
            continue
        for index, case in enumerate(op.tests.cases):
            for dtype in op.tests.dtypes:
                yield pytest.param(op, case, getattr(torch, dtype), id=f"{op.name}-{index}-{dtype}")


def case_inputs(case: m.Case, dtype: torch.dtype, seed: int = 0) -> dict:
    """The call arguments of a test case: random tensors (``$dtype`` is ``dtype``) and literals."""
    generator = torch.Generator().manual_seed(seed)
    values: dict = {}
    for name, spec in case.inputs:
        if isinstance(spec, m.LiteralInput):
            values[name] = spec.value
        elif spec.is_int:
            values[name] = torch.randint(
                0, spec.high, spec.shape, generator=generator, dtype=getattr(torch, spec.dtype)
            )
        else:
            item_dtype = dtype if spec.dtype == m.DTYPE_PLACEHOLDER else getattr(torch, spec.dtype)
            noise = torch.randn(spec.shape, generator=generator) * (spec.scale or 1.0)
            values[name] = noise.to(item_dtype)
    return values


def case_layer(op: m.Op, case: m.Case, dtype: torch.dtype, seed: int = 0):
    """The vLLM layer of a test case, its parameters in ``dtype`` and random; needs the
    ``vllm_config`` fixture."""
    assert op.layer is not None
    cls = getattr(importlib.import_module(op.layer.module), op.layer.cls)
    kwargs = {key: dtype if value == m.DTYPE_PLACEHOLDER else value for key, value in case.init}
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        layer = cls(**kwargs)
    finally:
        torch.set_default_dtype(previous)
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for _, param in sorted(layer.named_parameters()):
            if param.is_floating_point():
                param.copy_(torch.randn(param.shape, generator=generator).to(param.dtype))
    return layer


@contextlib.contextmanager
def unchanged(*tensors: torch.Tensor | None):
    """Assert that the tensors hold the same values after the block as before it."""
    before = [None if t is None else t.clone() for t in tensors]
    yield
    for t, b in zip(tensors, before):
        if t is not None:
            assert torch.equal(t, b), "an input tensor was modified"


def assert_fresh(outputs, *inputs: torch.Tensor | None) -> None:
    """Assert no output is (or shares memory with) an input: impls are functional."""
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    ptrs = {t.untyped_storage().data_ptr() for t in inputs if t is not None}
    for out in outputs:
        if out is None:
            continue
        assert all(out is not t for t in inputs), "an input tensor object was returned"
        assert out.untyped_storage().data_ptr() not in ptrs, "an output aliases an input"


def cos_sin_cache(max_positions: int, rotary_dim: int) -> torch.Tensor:
    """A float32 [max_positions, rotary_dim] cache laid out as vLLM's: cos | sin of
    position * frequency."""
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, rotary_dim, 2, dtype=torch.float) / rotary_dim))
    freqs = torch.outer(torch.arange(max_positions, dtype=torch.float), inv_freq)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1)

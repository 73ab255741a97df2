"""Helpers shared by the backend tests (``tests.support.ops_helpers``).

What these tests need of the manifest, its dtypes and parity tolerances, comes from the model of
ops.yaml that ``codegen.manifest.project_manifest`` loads once; every op's test cases run in the
generated parity tests (``tests/generated``), the reference's contract and its agreement with
vLLM's ``forward_native`` included.
"""

from __future__ import annotations

import contextlib

import torch

from codegen.manifest import project_manifest

# The manifest's parity tolerances (ops.yaml's top level), per dtype.
TOLERANCES = {
    getattr(torch, dtype): dict(atol=tol.atol, rtol=tol.rtol)
    for dtype, tol in project_manifest().tolerances
}
DTYPES = list(TOLERANCES)


def op_tolerance(op_name: str, dtype: torch.dtype) -> dict[str, float]:
    """The parity tolerance of one op of ops.yaml at ``dtype`` (its own table, resolved by the
    manifest for every dtype the op's tests run in)."""
    op = next(o for o in project_manifest().ops if o.name == op_name)
    tol = dict(op.tests.tolerances)[str(dtype).rsplit(".", 1)[-1]]
    return {"atol": tol.atol, "rtol": tol.rtol}


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

"""Helpers shared by the operator implementation tests (imported as ``ops_helpers``)."""

import contextlib

import torch

DTYPES = [torch.float32, torch.float16, torch.bfloat16]

# The manifest's parity tolerances (ops.yaml), per dtype.
TOLERANCES = {
    torch.float32: dict(atol=1.0e-5, rtol=1.3e-6),
    torch.float16: dict(atol=1.0e-3, rtol=1.0e-3),
    torch.bfloat16: dict(atol=1.0e-2, rtol=1.6e-2),
}


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

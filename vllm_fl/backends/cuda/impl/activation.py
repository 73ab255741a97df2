"""CUDA vendor activations: vLLM's compiled ``torch.ops._C`` kernels, called exactly as the
in-tree ``forward_cuda`` methods call them (``op(out, x)`` into a fresh ``out``)."""

import torch


def _ops():
    """``torch.ops._C``, after ``vllm._custom_ops`` has loaded vLLM's compiled library."""
    import vllm._custom_ops  # noqa: F401

    return torch.ops._C


def _gated(op, x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    out = torch.empty(x.shape[:-1] + (d,), dtype=x.dtype, device=x.device)
    op(out, x)
    return out


def _pointwise(op, x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    op(out, x)
    return out


def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
    """``torch.ops._C.silu_and_mul(out, x)``."""
    return _gated(_ops().silu_and_mul, x)


def mul_and_silu(self, x: torch.Tensor) -> torch.Tensor:
    """``torch.ops._C.mul_and_silu(out, x)``."""
    return _gated(_ops().mul_and_silu, x)


def gelu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
    """``torch.ops._C.gelu_and_mul`` or ``gelu_tanh_and_mul``, by ``self.approximate``."""
    ops = _ops()
    if self.approximate == "none":
        return _gated(ops.gelu_and_mul, x)
    if self.approximate == "tanh":
        return _gated(ops.gelu_tanh_and_mul, x)
    raise ValueError(f"Unknown approximate mode: {self.approximate}")


def gelu_new(self, x: torch.Tensor) -> torch.Tensor:
    """``torch.ops._C.gelu_new(out, x)``."""
    return _pointwise(_ops().gelu_new, x)


def gelu_fast(self, x: torch.Tensor) -> torch.Tensor:
    """``torch.ops._C.gelu_fast(out, x)``."""
    return _pointwise(_ops().gelu_fast, x)


def quick_gelu(self, x: torch.Tensor) -> torch.Tensor:
    """``torch.ops._C.gelu_quick(out, x)``."""
    return _pointwise(_ops().gelu_quick, x)


def swigluoai_and_mul(self, x: torch.Tensor) -> torch.Tensor:
    """``torch.ops._C.swigluoai_and_mul(out, x, alpha, limit)``."""
    d = x.shape[-1] // 2
    out = torch.empty(x.shape[:-1] + (d,), dtype=x.dtype, device=x.device)
    _ops().swigluoai_and_mul(out, x, self.alpha, self.limit)
    return out

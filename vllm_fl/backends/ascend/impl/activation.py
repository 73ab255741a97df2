"""Ascend vendor activations: ``torch_npu`` kernels, as vllm-ascend calls them."""

import torch


def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
    """``torch_npu.npu_swiglu(x)``: silu(x[..., :d]) * x[..., d:] (vllm-ascend's SiluAndMul)."""
    import torch_npu

    return torch_npu.npu_swiglu(x)


def gelu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
    """``torch_npu.npu_geglu(x, dim=-1, approximate, activate_left=True)``.

    ``approximate`` is 0 for the exact GELU and 1 for the tanh one; ``activate_left=True``
    applies GELU to the left half, as vLLM's GeluAndMul does (the default gates the right
    half). It returns (out, gelu(left)); we keep out.
    """
    import torch_npu

    if self.approximate not in ("none", "tanh"):
        raise ValueError(f"Unknown approximate mode: {self.approximate}")
    approximate = 1 if self.approximate == "tanh" else 0
    out, _ = torch_npu.npu_geglu(x, dim=-1, approximate=approximate, activate_left=True)
    return out

"""FlagGems activations: vLLM's activation layers mapped to ``vllm_fl.kernels.pointwise``.

vLLM's SiluAndMul takes the whole ``[..., 2d]`` row: it maps to FlagGems' ``swiglu`` kernel,
not to ``silu_and_mul`` on two strided halves (see ``vllm_fl.kernels.pointwise``).
"""

import torch

from vllm_fl.kernels import pointwise


def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
    """silu(x[..., :d]) * x[..., d:]."""
    return pointwise.silu_and_mul(x)


def mul_and_silu(self, x: torch.Tensor) -> torch.Tensor:
    """x[..., :d] * silu(x[..., d:])."""
    return pointwise.mul_and_silu(x)


def gelu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
    """gelu(x[..., :d]) * x[..., d:], with the layer's ``approximate`` ("none" or "tanh")."""
    return pointwise.gelu_and_mul(x, self.approximate)


def gelu_new(self, x: torch.Tensor) -> torch.Tensor:
    """GPT-2's GELU is exactly the tanh-approximated GELU."""
    return pointwise.gelu_tanh(x)


def relu_squared(self, x: torch.Tensor) -> torch.Tensor:
    """max(x, 0)^2 with FlagGems' relu and mul."""
    import flag_gems

    positive = flag_gems.relu(x)
    return flag_gems.mul(positive, positive)


def gelu_fast(self, x: torch.Tensor) -> torch.Tensor:
    """0.7978845608 * x * (1 + 0.044715 x^2) = sqrt(2/pi) * (x + 0.044715 x^3): the tanh GELU."""
    return pointwise.gelu_tanh(x)


def quick_gelu(self, x: torch.Tensor) -> torch.Tensor:
    """x * sigmoid(1.702 x)."""
    return pointwise.quick_gelu(x)


def gelu(self, x: torch.Tensor) -> torch.Tensor:
    """The exact GELU: FlagGems' ``gelu_none`` kernel (``flag_gems.gelu(x)``)."""
    return pointwise.gelu(x, "none")


def gelu_tanh(self, x: torch.Tensor) -> torch.Tensor:
    """The tanh GELU: FlagGems' ``gelu_tanh`` kernel (``flag_gems.gelu(x, approximate="tanh")``)."""
    return pointwise.gelu(x, "tanh")


def swigluoai_and_mul(self, x: torch.Tensor) -> torch.Tensor:
    """GPT-OSS's clamped SwiGLU over the interleaved gate and up columns, in one kernel
    (FlagGems has none: ``vllm_fl.kernels.pointwise``)."""
    return pointwise.swigluoai_and_mul(x, self.alpha, self.limit)

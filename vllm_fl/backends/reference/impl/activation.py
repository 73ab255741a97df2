"""Reference activations: vLLM's ``forward_native`` formulas, in the input's dtype."""

import math

import torch
import torch.nn.functional as F

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
    """silu(x[..., :d]) * x[..., d:] (vLLM ``SiluAndMul.forward_native``)."""
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]


def mul_and_silu(self, x: torch.Tensor) -> torch.Tensor:
    """x[..., :d] * silu(x[..., d:]) (vLLM ``MulAndSilu.forward_native``)."""
    d = x.shape[-1] // 2
    return x[..., :d] * F.silu(x[..., d:])


def gelu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
    """gelu(x[..., :d], approximate=self.approximate) * x[..., d:]."""
    d = x.shape[-1] // 2
    return F.gelu(x[..., :d], approximate=self.approximate) * x[..., d:]


def gelu_new(self, x: torch.Tensor) -> torch.Tensor:
    """GPT-2's GELU (vLLM ``NewGELU.forward_native``)."""
    return 0.5 * x * (1.0 + torch.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * torch.pow(x, 3.0))))


def relu_squared(self, x: torch.Tensor) -> torch.Tensor:
    """max(x, 0)^2 (vLLM ``ReLUSquaredActivation.forward_native``)."""
    return torch.square(torch.nn.functional.relu(x))


def gelu_fast(self, x: torch.Tensor) -> torch.Tensor:
    """Fast tanh GELU (vLLM ``FastGELU.forward_native``)."""
    return 0.5 * x * (1.0 + torch.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x)))


def quick_gelu(self, x: torch.Tensor) -> torch.Tensor:
    """x * sigmoid(1.702 * x) (vLLM ``QuickGELU.forward_native``)."""
    return x * torch.sigmoid(1.702 * x)


def gelu(self, x: torch.Tensor) -> torch.Tensor:
    """The exact GELU (vLLM ``GELU.forward_native``)."""
    return F.gelu(x, approximate="none")


def gelu_tanh(self, x: torch.Tensor) -> torch.Tensor:
    """The tanh-approximated GELU (vLLM ``GELUTanh.forward_native``)."""
    return F.gelu(x, approximate="tanh")


def swigluoai_and_mul(self, x: torch.Tensor) -> torch.Tensor:
    """(u + 1) * g * sigmoid(alpha * g) of the clamped interleaved gate g = x[..., ::2] and up
    u = x[..., 1::2], in x's dtype (vLLM ``SwigluOAIAndMul.forward_native``)."""
    gate = x[..., ::2].clamp(min=None, max=self.limit)
    up = x[..., 1::2].clamp(min=-self.limit, max=self.limit)
    return (up + 1) * (gate * torch.sigmoid(gate * self.alpha))

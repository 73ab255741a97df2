"""FlagGems activations.

Which FlagGems entry point matters: ``flag_gems.swiglu`` reads the whole ``[..., 2d]`` row in
one kernel and is several times faster than ``flag_gems.silu_and_mul`` fed the two strided
halves (see DESIGN.md, measured on the H100). FlagGems' fused kernels compute in float32 and
round once, so they agree with the reference within the parity tolerances.
"""

import torch


def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
    """``flag_gems.swiglu(x)``: silu(x[..., :d]) * x[..., d:] (the first half is gated)."""
    import flag_gems

    return flag_gems.swiglu(x)


def mul_and_silu(self, x: torch.Tensor) -> torch.Tensor:
    """``flag_gems.silu_and_mul(a, b) = silu(a) * b`` with the halves swapped."""
    import flag_gems

    d = x.shape[-1] // 2
    return flag_gems.silu_and_mul(x[..., d:], x[..., :d])


def gelu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
    """``flag_gems.gelu_and_mul(a, b, approximate) = gelu(a) * b``."""
    import flag_gems

    d = x.shape[-1] // 2
    return flag_gems.gelu_and_mul(x[..., :d], x[..., d:], self.approximate)


def gelu_new(self, x: torch.Tensor) -> torch.Tensor:
    """GPT-2's GELU is exactly the tanh-approximated GELU: ``flag_gems.gelu(x, 'tanh')``."""
    import flag_gems

    return flag_gems.gelu(x, approximate="tanh")


def gelu_fast(self, x: torch.Tensor) -> torch.Tensor:
    """0.7978845608 * x * (1 + 0.044715 x^2) = sqrt(2/pi) * (x + 0.044715 x^3): the tanh GELU."""
    import flag_gems

    return flag_gems.gelu(x, approximate="tanh")


def quick_gelu(self, x: torch.Tensor) -> torch.Tensor:
    """x * sigmoid(1.702 x), composed of three FlagGems pointwise kernels (FlagGems has no
    fused quick GELU), rounding where the reference does."""
    import flag_gems

    return flag_gems.mul(x, flag_gems.sigmoid(flag_gems.mul(x, 1.702)))

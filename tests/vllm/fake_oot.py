"""Stand-in OOT classes for the registration unit tests (independent of the generated ones)."""

from vllm.model_executor.layers.activation import SiluAndMul
from vllm.model_executor.layers.layernorm import RMSNorm


class RMSNormFake(RMSNorm):
    def forward_oot(self, x, residual=None):
        return self.forward_native(x, residual)


class SiluAndMulFake(SiluAndMul):
    def forward_oot(self, x):
        return self.forward_native(x)


class WithInit(RMSNorm):
    def __init__(self, hidden_size):
        super().__init__(hidden_size)

    def forward_oot(self, x, residual=None):
        return self.forward_native(x, residual)


class NotASubclass(SiluAndMul):
    def forward_oot(self, x):
        return self.forward_native(x)


class NoForwardOot(SiluAndMul):
    pass


class SiluAndMulOther(SiluAndMul):
    """What another plugin registers for SiluAndMul."""

    def forward_oot(self, x):
        return self.forward_native(x)


FAKE_OOT_CLASSES = {
    "RMSNorm": "fake_oot:RMSNormFake",
    "SiluAndMul": "fake_oot:SiluAndMulFake",
}

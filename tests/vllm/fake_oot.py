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


# Subclasses of a replaced layer (ops.yaml `subclasses:`), as vLLM might define them: one that
# only builds itself differently, one whose chain to the layer defines a forward_* method.
class ScaledRMSNorm(RMSNorm):
    def __init__(self, hidden_size, eps=1e-6, scale=2.0):
        super().__init__(hidden_size, eps=eps)
        self.scale = scale


class OwnMathsRMSNorm(RMSNorm):
    def forward_native(self, x, residual=None):
        return super().forward_native(x * 2, residual)


class OwnMathsChild(OwnMathsRMSNorm):
    pass


class ScaledRMSNormFake(ScaledRMSNorm):
    forward_oot = RMSNormFake.forward_oot


class OwnMathsChildFake(OwnMathsChild):
    forward_oot = RMSNormFake.forward_oot


#: in-tree subclass name -> (the layer's in-tree name, "module:Class"), as vllm_fl.ops has them;
#: the last one names a module no vLLM has
FAKE_OOT_SUBCLASSES = {
    "ScaledRMSNorm": ("RMSNorm", "fake_oot:ScaledRMSNormFake"),
    "OwnMathsChild": ("RMSNorm", "fake_oot:OwnMathsChildFake"),
    "MissingRMSNorm": ("RMSNorm", "fake_oot_missing_module:MissingRMSNormFake"),
}

"""vLLM's contract for `compilation_config.custom_ops` (vLLM's own
tests/model_executor/test_enabled_custom_ops.py, its cases ported), checked with the plugin's
CPU platform active and the plugin's classes registered, in THIS process. Prints one JSON line per
case; started in a fresh interpreter by test_custom_ops_contract.py (the platform can only be
chosen before vLLM is imported).

For every layer it reports the class vLLM built, `enabled()` of the instance and of vLLM's
registered class (`op_registry[name]`), and which forward method `CustomOp` bound.
"""

from __future__ import annotations

import json

import vllm.plugins

vllm.plugins.load_general_plugins()

from vllm.config import (  # noqa: E402
    CompilationConfig,
    VllmConfig,
    get_cached_compilation_config,
    set_current_vllm_config,
)
from vllm.model_executor.custom_op import CustomOp, op_registry  # noqa: E402
from vllm.model_executor.layers.activation import (  # noqa: E402
    GeluAndMul,
    ReLUSquaredActivation,
    SiluAndMul,
)
from vllm.model_executor.layers.layernorm import RMSNorm  # noqa: E402
from vllm.platforms import current_platform  # noqa: E402

from vllm_fl.registration import prepare_model_process  # noqa: E402


@CustomOp.register("relu3")
class Relu3(ReLUSquaredActivation):
    pass


# (custom_ops as the user wrote it or None, compilation mode, backend); vLLM's own cases.
CASES = [
    (None, 0, "eager"),
    (None, 3, "eager"),
    (None, 0, "inductor"),
    (None, 1, "inductor"),
    (None, 3, "inductor"),
    ("+rms_norm,-silu_and_mul", 0, "inductor"),
    ("none,-rms_norm,+relu3", 1, "eager"),
    ("all,-silu_and_mul", 2, "inductor"),
    ("-relu3,+relu2", 3, "eager"),
    ("none,-relu3,+rms_norm,+silu_and_mul", 3, "eager"),
    ("-rms_norm", 3, "eager"),
    ("none,+relu3", 3, "inductor"),
    ("all,-rms_norm", 3, "inductor"),
    ("none", 3, "inductor"),
    ("none", 0, "eager"),
    ("none,+rms_norm", 3, "inductor"),
    ("-silu_and_mul", 3, "inductor"),
    ("-silu_and_mul", 0, "eager"),
]
_FORWARDS = ("forward_oot", "forward_cpu", "forward_cuda", "forward_native")


def _bound(layer) -> str:
    # A bound method, or the function itself where vLLM's forward_native is a staticmethod.
    fn = getattr(layer._forward_method, "__func__", layer._forward_method)
    names = [n for n in _FORWARDS if getattr(type(layer), n, None) is fn]
    if names:
        return names[0]
    # CustomOp.maybe_compile wraps a disabled layer's forward_native (functools.wraps).
    wrapped = getattr(fn, "__wrapped__", None)
    name = getattr(wrapped or fn, "__name__", "")
    return f"compiled {name}" if wrapped is not None and name in _FORWARDS else repr(fn)


def _layer(layer, name: str) -> dict:
    return {
        "class": f"{type(layer).__module__}.{type(layer).__name__}",
        "enabled": layer.enabled(),
        "registry_enabled": op_registry[name].enabled(),
        "forward": _bound(layer),
    }


def main() -> None:
    print("PLATFORM", type(current_platform).__name__, flush=True)
    for custom_ops, mode, backend in CASES:
        vllm_config = VllmConfig(
            compilation_config=CompilationConfig(
                backend=backend,
                mode=mode,
                custom_ops=custom_ops.split(",") if custom_ops else [],
            )
        )
        prepare_model_process(vllm_config)  # what the plugin's worker does before load_model
        get_cached_compilation_config.cache_clear()
        with set_current_vllm_config(vllm_config):
            result = {
                "case": [custom_ops, mode, backend],
                "default_on": CustomOp.default_on(),
                "custom_ops": list(vllm_config.compilation_config.custom_ops),
                "rms_norm": _layer(RMSNorm(1024), "rms_norm"),
                "silu_and_mul": _layer(SiluAndMul(), "silu_and_mul"),
                "gelu_and_mul": _layer(GeluAndMul(), "gelu_and_mul"),
                "relu3": _layer(Relu3(), "relu3"),
            }
        print("CONTRACT " + json.dumps(result), flush=True)


main()

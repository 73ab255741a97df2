"""torch.library.opcheck of every custom op the opaque backends define (run as a script).

The opaque kernels (FlagGems, vLLM's CUDA ops, torch_npu) cannot run on a CPU-only machine, so
each op gets a CPU kernel here that runs its registered fake (the reference implementation,
which is functional) on real tensors. That exercises what opcheck checks about the definition:
the schema inferred from the kernel's annotations, no aliasing of inputs, the fake agreeing with
the kernel, and tracing through AOT dispatch. The arguments are the ones the generated adapter
(the OpImpl's fn, compiled with fullgraph=True, as it calls the custom op only under Dynamo)
passes for a real layer (tests/integration/layer_samples.py), captured on the way. Prints one line: OPCHECK {"checked": {qualname/case: "ok" | error}, "unchecked": [...]}.
This gives the ops CPU kernels for the rest of the process: hence a separate process.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[2]))  # codegen: the manifest's model

import torch  # noqa: E402
from layer_samples import function_samples, make_inputs, make_layer, samples  # noqa: E402
from vllm.config import VllmConfig, set_current_vllm_config  # noqa: E402

from vllm_fl.dispatch import get_default_manager, opaque  # noqa: E402
from vllm_fl.ops import OOT_CLASSES  # noqa: E402
from vllm_fl.registration import _in_tree_base, _load_class, op_name_of  # noqa: E402


def _no_grad(value):
    return value.detach() if isinstance(value, torch.Tensor) else value


def main() -> int:
    registry = get_default_manager().registry  # builds the registry: defines the custom ops
    defined = set(opaque.defined())
    checked: dict[str, str] = {}
    seen: set[str] = set()
    captured: list[tuple] = []

    def capture(fake):
        def kernel(*args):
            captured.append(args)
            return fake(*args)

        return kernel

    def check(op: str, case_id: str, call_adapter) -> None:
        """opcheck every custom op defined for `op`, with the arguments its adapter passes."""
        for impl in registry.get_implementations(op):
            qualname = f"vllm_fl::{impl.impl_id.split('.', 1)[-1]}_{op}"
            if qualname not in defined:
                continue
            seen.add(qualname)
            key = f"{qualname}/{case_id}"
            opdef = opaque._DEFINED[qualname]
            opdef.register_kernel("cpu", capture(opdef._abstract_fn))
            try:
                captured.clear()
                # Under Dynamo the adapter calls the custom op (outside it calls the kernel
                # directly): trace it, fullgraph, to get there and capture its args.
                call_adapter(torch.compile(impl.fn, backend="eager", fullgraph=True))
                torch._dynamo.reset()
                ns, opname = qualname.split("::")
                packet = getattr(getattr(torch.ops, ns), opname)
                # Inference-only ops (no autograd formula; vLLM runs under inference mode): a
                # layer's nn.Parameter weight is passed without its grad flag.
                args = tuple(_no_grad(a) for a in captured[-1])
                torch.library.opcheck(packet.default, args)
                checked[key] = "ok"
            except Exception:  # noqa: BLE001 - reported, the test fails on it
                checked[key] = traceback.format_exc(limit=6)

    with set_current_vllm_config(VllmConfig()):
        for name, case_id, ctor, spec in samples(OOT_CLASSES):
            base = _in_tree_base(_load_class(OOT_CLASSES[name]), name)
            check(
                op_name_of(base),
                case_id,
                lambda traced: traced(make_layer(base, ctor), **make_inputs(spec)),
            )
        for op, case_id, spec in function_samples():
            check(op, case_id, lambda traced: traced(**make_inputs(spec)))
    report = {"checked": checked, "unchecked": sorted(defined - seen)}
    print("OPCHECK " + json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""torch.library.opcheck of every custom op the opaque backends define (run as a script).

    python -m tests.vllm.opcheck_opaque [--device cpu|cuda] [--shard I/N]

``--device cpu`` (the default; test_compile_safety.py runs it): the opaque kernels (FlagGems,
vLLM's CUDA ops, torch_npu) cannot run on a CPU-only machine, so each op gets a CPU kernel here
that runs its registered fake (the reference implementation, which is functional) on real
tensors. That exercises what opcheck checks about the definition: the schema inferred from the
kernel's annotations, no aliasing of inputs, the fake agreeing with the kernel, and tracing
through AOT dispatch. This gives the ops CPU kernels for the rest of the process: hence a
separate process.

``--device cuda`` (a GPU with the backends' libraries): the real kernels run on CUDA tensors, so
opcheck also compares each real kernel with its fake; ops of a backend that is unavailable here
(ascend on an NVIDIA machine) are listed as such, not checked.

The arguments are the ones the generated adapter (the OpImpl's fn, compiled with
fullgraph=True, as it calls the custom op only under Dynamo) passes for a real layer
(tests/support/layer_samples.py), captured on the way. Prints one line:
OPCHECK {"device": ..., "checked": {qualname/case: "ok" | error}, "unavailable": {qualname:
reason}, "unchecked": [...]}.

``--shard I/N`` checks only the ops whose position in the sorted op list is I modulo N (each op's
custom ops and cases stay together), so the whole check can be split across processes.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback

import torch
from vllm.config import VllmConfig, set_current_vllm_config

from tests.support.layer_samples import (
    function_samples,
    installed,
    make_inputs,
    make_layer,
    op_of,
    samples,
)
from vllm_fl.dispatch import get_default_manager
from vllm_fl.dispatch.runtime import registration
from vllm_fl.ops import OOT_CLASSES
from vllm_fl.registration import _in_tree_base, _load_class


def _no_grad(value):
    return value.detach() if isinstance(value, torch.Tensor) else value


def _to(device: str, value):
    return value.to(device) if isinstance(value, torch.Tensor) else value


#: opcheck's checks; test_schema detects mutation with arithmetic float8 tensors lack (on CPU),
#: so ops taking float8 inputs skip it: their parity tests check that inputs stay bit for bit
OPCHECK_UTILS = (
    "test_schema",
    "test_autograd_registration",
    "test_faketensor",
    "test_aot_dispatch_dynamic",
)


def _test_utils(args: tuple) -> tuple[str, ...]:
    float8 = any(isinstance(a, torch.Tensor) and a.dtype == torch.float8_e4m3fn for a in args)
    return tuple(u for u in OPCHECK_UTILS if not (float8 and u == "test_schema"))


def _shard(text: str) -> tuple[int, int]:
    index, _, count = text.partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard {text!r}: expected I/N, e.g. 0/4") from None
    if not 0 <= i < n:
        raise argparse.ArgumentTypeError(f"--shard {text!r}: I must be in 0..N-1")
    return i, n


def _op_of_qualname(qualname: str, ops: list[str]) -> str | None:
    """The op a custom op ``vllm_fl::<backend>_<op>`` belongs to (the longest op name that ends
    it: ``fused_experts_quant`` before ``fused_experts``)."""
    name = qualname.split("::", 1)[-1]
    matches = [op for op in ops if name.endswith("_" + op)]
    return max(matches, key=len) if matches else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="opcheck of the opaque backends' custom ops")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--shard", type=_shard, default=(0, 1), metavar="I/N")
    options = parser.parse_args(argv)
    device = options.device
    registry = get_default_manager().registry  # builds the registry: defines the custom ops
    all_ops = sorted(registry.list_operators())
    index, count = options.shard
    mine = {op for position, op in enumerate(all_ops) if position % count == index}
    # a custom op of no known op stays in shard 0, where it is reported unchecked
    defined = {
        q
        for q in registration.defined()
        if _op_of_qualname(q, all_ops) in mine or (index == 0 and not _op_of_qualname(q, all_ops))
    }
    checked: dict[str, str] = {}
    unavailable: dict[str, str] = {}
    seen: set[str] = set()
    captured: list[tuple] = []

    def capture(kernel):
        def capturing(*args):
            captured.append(args)
            return kernel(*args)

        return capturing

    def check(op: str, case_id: str, call_adapter) -> None:
        """opcheck every custom op defined for `op`, with the arguments its adapter passes."""
        if op not in mine:
            return
        for impl in registry.get_implementations(op):
            qualname = f"vllm_fl::{impl.impl_id.split('.', 1)[-1]}_{op}"
            if qualname not in defined:
                continue
            seen.add(qualname)
            opdef = registration.definition(qualname)
            if device == "cpu":
                kernel = opdef._abstract_fn  # the fake, on real tensors: no backend runs here
            else:
                available, reason = impl.check_available()
                if not available:
                    unavailable[qualname] = reason or "unavailable"
                    continue
                kernel = opdef._init_fn  # the backend's own kernel
            key = f"{qualname}/{case_id}"
            opdef.register_kernel(device, capture(kernel))
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
                torch.library.opcheck(packet.default, args, test_utils=_test_utils(args))
                checked[key] = "ok"
            except Exception:  # noqa: BLE001 - reported, the test fails on it
                checked[key] = traceback.format_exc(limit=6)

    def inputs(spec: dict, dtype: torch.dtype = torch.float32) -> dict:
        return {k: _to(device, v) for k, v in make_inputs(spec, dtype=dtype).items()}

    with set_current_vllm_config(VllmConfig()):
        for name, case_id, ctor, spec in samples(installed(OOT_CLASSES)):
            base = _in_tree_base(_load_class(OOT_CLASSES[name]), name)
            check(
                op_of(name),
                case_id,
                lambda traced: traced(make_layer(base, ctor).to(device), **inputs(spec)),
            )
        for op, case_id, spec, dtype in function_samples():
            check(op, case_id, lambda traced: traced(**inputs(spec, dtype)))
    report = {
        "device": device,
        "checked": checked,
        "unavailable": unavailable,
        "unchecked": sorted(defined - seen),
    }
    print("OPCHECK " + json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

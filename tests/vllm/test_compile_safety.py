"""torch.compile safety of the OOT layers: forward_oot on the reference backend compiles with
fullgraph=True (no graph break) and matches vLLM's own forward_native; every opaque custom op
the generated backends define passes torch.library.opcheck (in a subprocess, see
opcheck_opaque.py, because it gives those ops a CPU kernel), and on a GPU (marked ``gpu``) with
the real kernels."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("vllm")

import torch  # noqa: E402

from tests.support.layer_samples import (
    installed,
    make_inputs,
    make_layer,
    op_of,
    samples,
)  # noqa: E402
from tests.support.plugin_env import REPO  # noqa: E402
from vllm_fl.ops import OOT_CLASSES  # noqa: E402
from vllm_fl.registration import _load_class  # noqa: E402

CASES = [pytest.param(*s, id=f"{s[0]}-{s[1]}") for s in samples(installed(OOT_CLASSES))]


def _close(a, b):
    if isinstance(a, (tuple, list)):
        assert isinstance(b, (tuple, list)) and len(a) == len(b)
        for x, y in zip(a, b):
            _close(x, y)
    elif a is None:
        assert b is None
    else:
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1.3e-6)


@pytest.mark.parametrize("name, case_id, ctor, spec", CASES)
def test_forward_oot_compiles_fullgraph_on_reference(vllm_config, name, case_id, ctor, spec):
    from vllm_fl.dispatch import get_default_manager, with_preference

    cls = _load_class(OOT_CLASSES[name])
    layer = make_layer(cls, ctor)
    inputs = make_inputs(spec)
    expected = layer.forward_native(**_cloned(inputs))
    # The reference is asked for by name: a vendor available on this machine would otherwise win.
    with with_preference("reference"):
        # Resolution happens before tracing, as the plugin's registration does it in vLLM
        # (resolve_all); Dynamo then sees the trampoline calling the selected impl.
        get_default_manager().resolve_all()
        torch._dynamo.reset()
        explained = torch._dynamo.explain(layer.forward_oot)(**_cloned(inputs))
        assert explained.graph_break_count == 0, explained.break_reasons
        compiled = torch.compile(layer.forward_oot, fullgraph=True, backend="aot_eager")
        _close(compiled(**_cloned(inputs)), expected)
        assert get_default_manager().used_impls()[op_of(name)] == "reference.torch"


def _cloned(inputs: dict) -> dict:
    return {k: _clone(v) for k, v in inputs.items()}


def _clone(v):
    return v.clone() if isinstance(v, torch.Tensor) else v


def _opcheck(device: str, timeout: float, shard: str = "0/1") -> dict:
    """The report of opcheck_opaque.py run with `--device device` (and `--shard shard`) in its
    own process."""
    proc = subprocess.run(
        [sys.executable, "-m", "tests.vllm.opcheck_opaque", "--device", device, "--shard", shard],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("OPCHECK ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(lines[-1][len("OPCHECK ") :])
    assert report["checked"], report
    failed = {k: v for k, v in report["checked"].items() if v != "ok"}
    assert not failed, json.dumps(failed, indent=1)
    assert not report["unchecked"], report["unchecked"]
    return report


#: the CPU check in this many processes, so that no one of them nears its timeout as ops are added
CPU_SHARDS = 4


@pytest.mark.parametrize("shard", [f"{i}/{CPU_SHARDS}" for i in range(CPU_SHARDS)])
def test_opaque_custom_ops_pass_opcheck(shard):
    report = _opcheck("cpu", timeout=300, shard=shard)
    assert not report["unavailable"], report["unavailable"]


@pytest.mark.gpu("vllm", "flag_gems")
def test_opaque_custom_ops_pass_opcheck_on_gpu():
    """The real FlagGems and vLLM CUDA kernels against their fakes, on CUDA tensors."""
    report = _opcheck("cuda", timeout=900)
    backends = {key.split("::", 1)[1].split("_", 1)[0] for key in report["checked"]}
    assert {"flagos", "cuda"} <= backends, sorted(report["checked"])
    # only backends of another accelerator may be left out
    assert all(q.startswith("vllm_fl::ascend_") for q in report["unavailable"]), report

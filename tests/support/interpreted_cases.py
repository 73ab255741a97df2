"""The ops.yaml test cases of an op through one impl against the reference, for the scripts that
run impls in Triton's interpreter (``tests/kernels/attention_interpreted.py``,
``tests/kernels/mla_interpreted.py``), and their results read back by the tests that start them.
No side effects on import: a script sets the interpreter up before importing this, a test never
does."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Sequence

import pytest
import torch

from tests.support.plugin_env import REPO

#: (suffix of the result's key, the inputs as the impl gets them)
Variant = tuple[str, Callable[[dict], dict]]
AS_GIVEN: tuple[Variant, ...] = (("", lambda inputs: inputs),)


def _clone(value):
    return value.clone() if isinstance(value, torch.Tensor) else value


def run_cases(
    name: str,
    impl: Callable,
    reference: Callable,
    dtypes: Sequence[torch.dtype],
    variants: Sequence[Variant] = AS_GIVEN,
) -> dict[str, str]:
    """Every test case of op ``name`` in each dtype and input variant: "ok", or how the impl's
    result (the arguments the op writes into, else what it returns) differs from the
    reference's beyond the op's tolerance in ops.yaml, keyed ``<op>/case<i>/<dtype><suffix>``."""
    from codegen.manifest import project_manifest
    from tests.support.layer_samples import make_inputs

    op = next(o for o in project_manifest().ops if o.name == name)
    tolerances = dict(op.tests.tolerances)
    results = {}
    for index, case in enumerate(op.tests.cases):
        for dtype in dtypes:
            tolerance = tolerances[str(dtype).removeprefix("torch.")]
            for suffix, variant in variants:
                inputs = make_inputs(dict(case.inputs), seed=1, dtype=dtype)
                expected = {k: _clone(v) for k, v in inputs.items()}
                want = reference(**expected)
                actual = variant({k: _clone(v) for k, v in inputs.items()})
                got = impl(**actual)
                key = f"{name}/case{index}/{str(dtype)[6:]}{suffix}"
                # what the op writes into its arguments, else what it returns
                if op.mutates:
                    pairs = [(w, actual[w], expected[w]) for w in op.mutates]
                else:
                    wants = want if isinstance(want, tuple) else (want,)
                    gots = got if isinstance(got, tuple) else (got,)
                    pairs = [(f"result {i}", g, w) for i, (g, w) in enumerate(zip(gots, wants))]
                try:
                    for what, result, reference_result in pairs:
                        if reference_result is None:
                            assert result is None, f"{what}: expected None"
                            continue
                        torch.testing.assert_close(
                            result,
                            reference_result,
                            atol=tolerance.atol,
                            rtol=tolerance.rtol,
                            msg=lambda text, what=what: f"{what}: {text}",
                        )
                    results[key] = "ok"
                except AssertionError as exc:
                    results[key] = str(exc)
    return results


def script_results(script: str, tag: str) -> dict[str, str]:
    """Run module ``script`` of the checkout (``python -m script``) in a fresh interpreter; the
    results it printed on its last ``TAG {...}`` line (an assertion naming its output where it
    failed or printed none).

    The scripts interpret vLLM's kernels on CPU tensors as vLLM's CPU build loads them (no
    FlagGems, vLLM's CPU platform); with vLLM's CUDA build installed, the generated parity tests
    run the same impls on the GPU instead, and these are skipped."""
    from vllm_fl import compat

    if not compat.is_cpu_build():
        pytest.skip(
            f"{script} interprets vLLM's CPU build's kernels; vLLM {compat.vllm_version()} "
            "here is its CUDA build, whose kernels the GPU parity tests (tests/generated) run"
        )
    proc = subprocess.run(
        [sys.executable, "-m", script], cwd=REPO, capture_output=True, text=True, timeout=900
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(f"{tag} ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(lines[-1].removeprefix(f"{tag} "))

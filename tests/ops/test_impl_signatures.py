"""Every impl named in ops.yaml exists with the op's signature (contract 4).

For an op with a ``layer`` the first parameter is ``self``; then the signature's parameters
with the same names, order and defaults. The generator checks this too; this test keeps the
hand-written side honest on its own.
"""

import importlib
import inspect
from pathlib import Path

import pytest
import yaml

from codegen.signature import FunctionSchema

MANIFEST = Path(__file__).resolve().parents[2] / "ops.yaml"


def _manifest():
    return yaml.safe_load(MANIFEST.read_text())


def _params(signature: str) -> list[tuple[str, object]]:
    """(name, default or inspect.Parameter.empty) per argument, parsed by the generator's own
    signature parser (the one contract both sides read)."""
    schema = FunctionSchema.parse(" ".join(signature.split()))
    return [
        (arg.name, arg.default_value if arg.has_default else inspect.Parameter.empty)
        for arg in schema.arguments
    ]


def _impls():
    manifest = _manifest()
    for op, spec in manifest["ops"].items():
        for backend, target in spec["impls"].items():
            fn = target["fn"] if isinstance(target, dict) else target
            package = manifest["backends"][backend]["package"]
            yield pytest.param(op, spec, package, fn, id=f"{op}-{backend}")


@pytest.mark.parametrize("op,spec,package,target", list(_impls()))
def test_impl_matches_signature(op, spec, package, target):
    module_name, fn_name = target.rsplit(".", 1)
    module = importlib.import_module(f"{package}.impl.{module_name}")
    fn = getattr(module, fn_name)
    params = list(inspect.signature(fn).parameters.values())
    if "layer" in spec:
        assert params and params[0].name == "self", f"{target}: first parameter must be self"
        params = params[1:]
    expected = _params(spec["signature"])
    assert [(p.name, p.default) for p in params] == expected
    assert all(p.annotation is not inspect.Parameter.empty for p in params), "annotate params"
    assert inspect.signature(fn).return_annotation is not inspect.Signature.empty

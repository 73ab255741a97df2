"""Malformed manifests: each is one clear ``ops.yaml:<line>: <problem>, expected <what>`` error,
and nothing is written."""

from __future__ import annotations

import re

import pytest

from codegen_helpers import FIXTURES  # noqa: F401  (pytest puts this folder on sys.path)

VALID = (FIXTURES / "tree/ops.yaml").read_text()

# (id, text to replace, replacement, expected message, text on the line the error must name)
CASES = [
    (
        "yaml-syntax",
        "  fast:\n    kind: flagos",
        "  fast:\n    kind: [flagos",
        "invalid YAML",
        "    package: fxpkg.fast",
    ),
    (
        "unknown-top-level-key",
        "\ntolerances:\n",
        "\ntolerance:\n",
        "unknown key 'tolerance' in the manifest, expected one of backends, tolerances, ops",
        "tolerance:",
    ),
    (
        "unknown-backend-key",
        "    requires: [math]",
        "    require: [math]",
        "unknown key 'require' in backend 'fast', expected one of kind, vendor, package, priority, "
        "requires, device, opaque, probe",
        "require: [math]",
    ),
    (
        "unknown-op-key",
        "    doc: SwiGLU",
        "    docs: SwiGLU",
        "unknown key 'docs' in op 'silu_and_mul', expected one of signature, doc",
        "docs: SwiGLU",
    ),
    (
        "missing-signature",
        "    signature: silu_and_mul(Tensor x) -> Tensor\n",
        "",
        "op 'silu_and_mul' has no 'signature', expected signature: silu_and_mul(Tensor x, ...)",
        "    doc: SwiGLU",
    ),
    (
        "missing-backend-package",
        "    package: fxpkg.reference\n",
        "",
        "backend 'reference' has no 'package', expected package: the Python package",
        "    kind: reference",
    ),
    (
        "bad-kind",
        "kind: flagos",
        "kind: triton",
        "kind of backend 'fast' is 'triton', expected flagos | vendor | reference",
        "kind: triton",
    ),
    (
        "priority-not-int",
        "priority: 150",
        "priority: high",
        "priority of backend 'fast' is the string 'high', expected an integer",
        "priority: high",
    ),
    (
        "priority-bool",
        "priority: 150",
        "priority: true",
        "priority of backend 'fast' is the boolean true, expected an integer",
        "priority: true",
    ),
    (
        "impl-priority-float",
        "priority: 120",
        "priority: 1.5",
        "priority of impl 'acme' of op 'rms_norm' is the number 1.5, expected an integer",
        "priority: 1.5",
    ),
    (
        "vendor-without-name",
        "    vendor: acme\n",
        "",
        "backend 'acme' has kind vendor but no 'vendor', expected vendor: <vendor name>",
        "    kind: vendor",
    ),
    (
        "undeclared-backend",
        "      fast: act.silu_and_mul",
        "      turbo: act.silu_and_mul",
        "impls of op 'silu_and_mul' names undeclared backend 'turbo', expected one of fast, "
        "reference, acme",
        "turbo: act.silu_and_mul",
    ),
    (
        "injection-in-impl",
        "      fast: act.silu_and_mul",
        "      fast: act.silu_and_mul;import os",
        "impl 'fast' of op 'silu_and_mul' is 'act.silu_and_mul;import os', expected module.function",
        "fast: act.silu_and_mul;import os",
    ),
    (
        "injection-in-package",
        "package: fxpkg.fast",
        "package: 'fxpkg.fast; import os'",
        "package of backend 'fast' 'fxpkg.fast; import os' is not a dotted Python name",
        "package: 'fxpkg.fast",
    ),
    (
        "bad-op-identifier",
        "  pick_backend:",
        "  pick-backend:",
        "op name 'pick-backend' is not an identifier, expected an identifier",
        "  pick-backend:",
    ),
    (
        "bad-signature-type",
        "silu_and_mul(Tensor x) -> Tensor",
        "silu_and_mul(Tensr x) -> Tensor",
        "bad signature of op 'silu_and_mul': unknown type 'Tensr'",
        "Tensr x",
    ),
    (
        "signature-name-mismatch",
        "silu_and_mul(Tensor x) -> Tensor",
        "swiglu(Tensor x) -> Tensor",
        "signature names 'swiglu' under op 'silu_and_mul', expected "
        "a signature starting with silu_and_mul(",
        "swiglu(Tensor x)",
    ),
    (
        "bad-default-type",
        "Tensor? residual=None",
        "Tensor? residual=1",
        "default 1 does not fit type Tensor? of 'residual'",
        "residual=1",
    ),
    (
        "unknown-dtype",
        "dtypes: [float32, bfloat16]",
        "dtypes: [float32, float8]",
        "unknown dtype 'float8' in tests of op 'silu_and_mul', expected one of float32",
        "float8",
    ),
    (
        "dtype-without-tolerance",
        "dtypes: [float32]",
        "dtypes: [float64]",
        "dtype 'float64' of op 'rms_norm' has no tolerance",
        "dtypes: [float64]",
    ),
    (
        "unknown-input",
        "inputs: {x: [3, 16]}\n\n",
        "inputs: {y: [3, 16]}\n\n",
        "input 'y' of test case of op 'silu_and_mul' is not an argument, expected one of x",
        "inputs: {y: [3, 16]}",
    ),
    (
        "missing-required-input",
        "- init: {hidden_size: 16, eps: 1.0e-6}\n          inputs: {x: [3, 16]}",
        "- init: {hidden_size: 16, eps: 1.0e-6}\n          inputs: {residual: [3, 16]}",
        "inputs of test case of op 'rms_norm' lack required argument 'x', expected a value for x",
        "inputs: {residual: [3, 16]}",
    ),
    (
        "bad-shape",
        "inputs: {x: [3, 16]}\n\n",
        "inputs: {x: [3, -1]}\n\n",
        "dimension -1 in input 'x' of test case of op 'silu_and_mul', expected a positive integer",
        "inputs: {x: [3, -1]}",
    ),
    (
        "tests-without-reference",
        "      reference: act.silu_and_mul\n",
        "",
        "op 'silu_and_mul' has tests but no reference impl to compare with",
        "    tests:",
    ),
    (
        "reads-without-layer",
        "    doc: The attention backend class path.\n",
        "    doc: The attention backend class path.\n    reads: {weight: Tensor}\n",
        "op 'pick_backend' has 'reads' but no 'layer', expected 'reads' only for ops with a layer",
        "reads: {weight: Tensor}",
    ),
    (
        "duplicate-key",
        "    priority: 50\n",
        "    priority: 50\n    priority: 60\n",
        "duplicate key 'priority' (first at line",
        "    priority: 60",
    ),
    (
        "opaque-ambiguous-return",
        "-> Tensor | (Tensor, Tensor)",
        "-> Tensor | (Tensor, Tensor?)",
        "op 'rms_norm' cannot be wrapped as a custom op for opaque backend 'fast': return forms "
        "Tensor and (Tensor, Tensor?) both flatten to 1 tensor(s)",
        "(Tensor, Tensor?)",
    ),
    (
        "duplicate-impl-id",
        "    kind: reference\n",
        "    kind: flagos\n",
        "backend 'reference' has impl id 'default.flagos', already used by backend 'fast' (line 5)",
        "  reference:",
    ),
    (
        "bad-device",
        "device: cuda",
        "device: gpu",
        "device of backend 'acme' is 'gpu', which is no torch device type, expected a torch "
        "device type (cuda, npu, xpu, musa, mlu, cpu, ...); 'cuda' for that chip",
        "device: gpu",
    ),
    (
        "requires-not-a-list",
        "requires: [math]",
        "requires: math",
        "requires of backend 'fast' is the string 'math', expected a list of module names",
        "requires: math",
    ),
    (
        "keyword-as-op-name",
        "  pick_backend:",
        "  lambda:",
        "op name 'lambda' is not an identifier, expected an identifier",
        "  lambda:",
    ),
    (
        "reserved-argument-name",
        "silu_and_mul(Tensor x) -> Tensor",
        "silu_and_mul(Tensor layer) -> Tensor",
        "argument 'layer' of op 'silu_and_mul' is a reserved name",
        "Tensor layer",
    ),
    (
        "inplace-names-no-argument",
        "inplace: [x, residual]",
        "inplace: [x, resid]",
        "inplace of op 'rms_norm' names 'resid', which is not an argument, expected one of x, "
        "residual",
        "inplace: [x, resid]",
    ),
    (
        "inplace-not-a-list",
        "inplace: [x, residual]",
        "inplace: x",
        "inplace of op 'rms_norm' is the string 'x', expected a list of the signature's Tensor "
        "arguments",
        "inplace: x",
    ),
    (
        "eager-without-inplace",
        "    inplace: [x, residual]\n",
        "",
        "impl 'fast' of op 'rms_norm' has an 'eager' variant but op 'rms_norm' declares no "
        "'inplace' arguments, expected 'eager' only for ops with inplace: [...]",
        "fast: {fn: norm.rms_norm, eager:",
    ),
    (
        "eager-not-module-function",
        "fast: {fn: norm.rms_norm, eager: norm.rms_norm_inplace}",
        "fast: {fn: norm.rms_norm, eager: rms_norm_inplace}",
        "eager variant of impl 'fast' of op 'rms_norm' is 'rms_norm_inplace', expected "
        "module.function",
        "eager: rms_norm_inplace}",
    ),
    (
        "function-and-layer",
        "    function: vllm._custom_ops.scale_into\n",
        "    function: vllm._custom_ops.scale_into\n"
        "    layer: vllm.model_executor.layers.activation.ScaleInto\n",
        "op 'scale_into' has both 'layer' and 'function', expected 'layer' for a vLLM CustomOp",
        "    function: vllm._custom_ops.scale_into",
    ),
    (
        "function-without-module",
        "function: vllm._custom_ops.scale_into",
        "function: scale_into",
        "function of op 'scale_into' 'scale_into' has no module",
        "function: scale_into",
    ),
    (
        "function-replaced-twice",
        "  pick_backend:\n",
        "  scale_twice:\n"
        "    signature: scale_twice(Tensor x) -> Tensor\n"
        "    doc: Twice.\n"
        "    function: vllm._custom_ops.scale_into\n"
        "    impls: {acme: act.scale_twice}\n\n"
        "  pick_backend:\n",
        "op 'scale_into' replaces vllm._custom_ops.scale_into, already replaced by op "
        "'scale_twice'",
        "  scale_into:",
    ),
    (
        "mutates-with-a-return",
        "scale_into(Tensor x, Tensor dest, float factor=2.0) -> None",
        "scale_into(Tensor x, Tensor dest, float factor=2.0) -> Tensor",
        "op 'scale_into' declares 'mutates' but returns Tensor, expected -> None",
        "signature: scale_into(",
    ),
    (
        "none-without-mutates",
        "    mutates: [dest]\n",
        "",
        "op 'scale_into' returns None but declares no 'mutates' arguments",
        "signature: scale_into(",
    ),
    (
        "mutates-a-float",
        "mutates: [dest]",
        "mutates: [factor]",
        "mutates of op 'scale_into' names 'factor' of type float, expected Tensor arguments only",
        "mutates: [factor]",
    ),
    (
        "mutates-unknown-argument",
        "mutates: [dest]",
        "mutates: [dst]",
        "mutates of op 'scale_into' names 'dst', which is not an argument",
        "mutates: [dst]",
    ),
    (
        "scale-zero",
        "inputs: {x: [3, 16], dest: [3, 16]}",
        "inputs: {x: {shape: [3, 16], scale: 0}, dest: [3, 16]}",
        "scale of input 'x' of test case of op 'scale_into' is 0.0, expected a finite number above 0",
        "scale: 0}",
    ),
    (
        "values-with-a-shape",
        "inputs: {x: [3, 16], dest: [3, 16]}",
        "inputs: {x: {values: [1, 2], shape: [2]}, dest: [3, 16]}",
        "input 'x' of test case of op 'scale_into' has both 'values' and 'shape', expected "
        "values: [...] with an optional dtype, nothing else",
        "shape: [2]}",
    ),
    (
        "values-not-rectangular",
        "inputs: {x: [3, 16], dest: [3, 16]}",
        "inputs: {x: {values: [[1, 2], [3]]}, dest: [3, 16]}",
        "values of input 'x' of test case of op 'scale_into' are not rectangular, expected a list "
        "of numbers like [0, 5, 17], or of equal-length lists of them",
        "values: [[1, 2], [3]]",
    ),
    (
        "values-beyond-the-dtype",
        "inputs: {x: [3, 16], dest: [3, 16]}",
        "inputs: {x: {values: [-1, 300], dtype: int8}, dest: [3, 16]}",
        "a value of input 'x' of test case of op 'scale_into' is 300, expected an integer in "
        "[-128, 127]",
        "values: [-1, 300]",
    ),
    (
        "values-not-numbers",
        "inputs: {x: [3, 16], dest: [3, 16]}",
        "inputs: {x: {values: [1, two]}, dest: [3, 16]}",
        "a value of input 'x' of test case of op 'scale_into' is the string 'two', expected a "
        "finite number",
        "values: [1, two]",
    ),
    ("empty-manifest", VALID, "", "the manifest is empty", None),
]


def _line_of(text: str, anchor: str | None) -> int:
    if anchor is None:
        return 1
    for number, line in enumerate(text.splitlines(), 1):
        if anchor.strip("\n").splitlines()[0] in line:
            return number
    raise AssertionError(f"anchor {anchor!r} not in the mutated manifest")


def test_there_are_at_least_15_cases():
    assert len(CASES) >= 15


@pytest.mark.parametrize(
    "old, new, message, anchor", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_malformed_manifest(generated, cli, snapshot, old, new, message, anchor):
    assert VALID.count(old) == 1, f"{old!r} must occur once in the fixture manifest"
    text = VALID.replace(old, new)
    (generated / "ops.yaml").write_text(text)
    before = snapshot(generated)
    rc, out, err = cli("--root", generated)
    assert rc == 1, out
    first = err.splitlines()[0]
    match = re.match(r"error: ops\.yaml:(\d+): (.*)$", first)
    assert match, first
    assert int(match.group(1)) == _line_of(text, anchor), first
    assert message in match.group(2)
    assert ", expected " in match.group(2)
    assert snapshot(generated) == before

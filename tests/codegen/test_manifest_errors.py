"""Malformed manifests: each is one clear ``ops.yaml:<line>: <problem>, expected <what>`` error,
and nothing is written."""

from __future__ import annotations

import re

import pytest

from tests.support.codegen_trees import FIXTURES

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
        "collective-unknown-method",
        "    collective: all_reduce\n",
        "    collective: broadcast\n",
        "collective of op 'all_reduce' is 'broadcast', no method of vLLM's device communicator "
        "the plugin replaces, expected one of all_reduce, all_gather",
        "    collective: broadcast",
    ),
    (
        "collective-and-function",
        "    collective: all_reduce\n",
        "    collective: all_reduce\n    function: vllm._custom_ops.all_reduce\n",
        "op 'all_reduce' has 'collective' and also 'function', expected 'collective' alone",
        "    collective: all_reduce",
    ),
    (
        "collective-replaced-twice",
        "    collective: send\n",
        "    collective: all_reduce\n",
        "op 'send' replaces the communicator's all_reduce, already replaced by op 'all_reduce'",
        "  send:",
    ),
    (
        "collective-tests-on-recv",
        "      reference: comm.recv\n",
        "      reference: comm.recv\n    tests:  # recv's\n      dtypes: [float32]\n"
        "      cases:\n        - inputs: {size: [3, 5]}\n",
        "op 'recv' replaces recv and has tests, expected no tests: the tests of the op replacing "
        "send check recv",
        "    tests:  # recv's",
    ),
    (
        "collective-test-with-init",
        "        - inputs: {input_: [4, 6]}\n",
        "        - init: {hidden_size: 6}\n          inputs: {input_: [4, 6]}\n",
        "test case of op 'all_reduce' has 'init' but the op has no layer",
        "        - init: {hidden_size: 6}",
    ),
    (
        "tested-send-without-recv",
        "    collective: recv\n",
        "",
        "op 'send' replaces send and has tests, but no op replaces recv, expected an op with "
        "'collective: recv'",
        "  send:",
    ),
    (
        "int-list-literal-not-a-list",
        "  pick_backend:\n",
        "  pad_to:\n"
        "    signature: pad_to(Tensor x, int[] sizes) -> Tensor\n"
        "    doc: Pads.\n"
        "    impls:\n"
        "      reference: act.pad_to\n"
        "    tests:\n"
        "      dtypes: [float32]\n"
        "      cases:\n"
        "        - inputs: {x: [3, 4], sizes: 3}\n"
        "  pick_backend:\n",
        "input 'sizes' of test case of op 'pad_to' is the integer 3, expected a list of "
        "integers like [3, 2]",
        "sizes: 3}",
    ),
    (
        "int-list-literal-bad-element",
        "  pick_backend:\n",
        "  pad_to:\n"
        "    signature: pad_to(Tensor x, int[]? sizes=None) -> Tensor\n"
        "    doc: Pads.\n"
        "    impls:\n"
        "      reference: act.pad_to\n"
        "    tests:\n"
        "      dtypes: [float32]\n"
        "      cases:\n"
        "        - inputs: {x: [3, 4], sizes: [3, two]}\n"
        "  pick_backend:\n",
        "an element of input 'sizes' of test case of op 'pad_to' is",
        "sizes: [3, two]}",
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
        "cache-written-without-slots",
        "    mutates: [dest]\n",
        "    mutates: [dest]\n    cache: {tensors: [dest]}\n",
        "cache of op 'scale_into' has no 'slots' but the op writes into 'dest', expected slots: "
        "the argument with each token's slot",
        "    cache: {tensors: [dest]}",
    ),
    (
        "cache-slots-of-an-unwritten-cache",
        "    mutates: [dest]\n",
        "    mutates: [dest]\n    cache: {tensors: [x], slots: dest}\n",
        "cache of op 'scale_into' writes slots of 'x', which is not in 'mutates'",
        "    cache: {tensors: [x], slots: dest}",
    ),
    (
        "cache-slots-a-float",
        "    mutates: [dest]\n",
        "    mutates: [dest]\n    cache: {tensors: [dest], slots: factor}\n",
        "slots of cache of op 'scale_into' is 'factor', expected a Tensor argument that is not a "
        "cache: one of x",
        "    cache: {tensors: [dest], slots: factor}",
    ),
    (
        "cache-unknown-key",
        "    mutates: [dest]\n",
        "    mutates: [dest]\n    cache: {tensors: [dest], slot: x}\n",
        "slot",
        "    cache: {tensors: [dest], slot: x}",
    ),
    (
        "bounds-a-float",
        "    mutates: [dest]\n",
        "    mutates: [dest]\n    bounds: [factor]\n",
        "bounds of op 'scale_into' names 'factor' of type float, expected int arguments only",
        "    bounds: [factor]",
    ),
    (
        "bounds-unknown-argument",
        "    mutates: [dest]\n",
        "    mutates: [dest]\n    bounds: [max_len]\n",
        "bounds of op 'scale_into' names 'max_len', which is not an argument",
        "    bounds: [max_len]",
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
    # quantized inputs, derived inputs and round trips
    (
        "quantize-unknown-scheme",
        "scheme: fp8_group,",
        "scheme: fp8_grp,",
        "scheme of input 'a' of test case of op 'scaled_mm' is 'fp8_grp', expected one of "
        "fp8_tensor, fp8_token, fp8_group, fp8_block, int8_tensor, int8_token, int8_channel, "
        "int8_token_asym",
        "scheme: fp8_grp",
    ),
    (
        "quantize-missing-group",
        "group: [1, 32], scales: scale_a,",
        "scales: scale_a,",
        "input 'a' of test case of op 'scaled_mm' has no 'group', which scheme 'fp8_group' "
        "needs, expected group: [1, g]",
        "scheme: fp8_group, scales: scale_a",
    ),
    (
        "quantize-group-for-a-scheme-without",
        "scheme: int8_token_asym, scales",
        "scheme: int8_token_asym, group: [1, 8], scales",
        "input 'a' of test case of op 'scaled_mm' has 'group' but scheme 'int8_token_asym' takes "
        "none, expected 'group' only with fp8_group, fp8_block",
        "group: [1, 8]",
    ),
    (
        "quantize-group-wrong-length",
        "group: [8, 32]",
        "group: [8, 32, 2]",
        "group of input 'b' of test case of op 'scaled_mm' is [8, 32, 2], expected [bn, bk] for "
        "scheme 'fp8_block'",
        "group: [8, 32, 2]",
    ),
    (
        "quantize-group-of-several-rows",
        "group: [1, 32]",
        "group: [2, 32]",
        "group of input 'a' of test case of op 'scaled_mm' is [2, 32], expected [1, g] for "
        "scheme 'fp8_group'",
        "group: [2, 32]",
    ),
    (
        "quantize-group-not-positive",
        "group: [1, 32]",
        "group: [1, -32]",
        "dimension -32 in group of input 'a' of test case of op 'scaled_mm', expected a positive "
        "integer",
        "group: [1, -32]",
    ),
    (
        "quantize-missing-scales",
        "group: [1, 32], scales: scale_a,",
        "group: [1, 32],",
        "input 'a' of test case of op 'scaled_mm' has no 'scales', expected scales: the Tensor "
        "argument that gets the scales",
        "scheme: fp8_group, group: [1, 32],",
    ),
    (
        "quantize-scales-not-an-argument",
        "scales: scale_b,\n                       transpose",
        "scales: scale_c,\n                       transpose",
        "scales of input 'b' of test case of op 'scaled_mm' names 'scale_c', not an argument, "
        "expected a Tensor argument of the signature: a, b, scale_a, scale_b, azp, azp_adj, bias",
        "scales: scale_c",
    ),
    (
        "quantize-scales-not-a-tensor",
        "inputs: {x: [3, 16], dest: [3, 16]}",
        "inputs: {x: {quantize: [3, 16], scheme: int8_token, scales: factor}, dest: [3, 16]}",
        "scales of input 'x' of test case of op 'scale_into' names 'factor', an argument of type "
        "float, expected a Tensor argument of the signature: x, dest",
        "scales: factor",
    ),
    (
        "quantize-scales-the-input-itself",
        "scales: scale_a, zeros: azp",
        "scales: a, zeros: azp",
        "scales of input 'a' of test case of op 'scaled_mm' names the input itself, expected "
        "another Tensor argument",
        "scales: a, zeros: azp",
    ),
    (
        "quantize-scales-set-by-the-case",
        "scales: scale_b, transpose: true}",
        "scales: bias, transpose: true}",
        "scales of input 'b' of test case of op 'scaled_mm' names 'bias', which the case also "
        "sets, expected an argument the case leaves to the quantized input",
        "scales: bias",
    ),
    (
        "quantize-scales-assigned-twice",
        "scales: scale_b, transpose: true}",
        "scales: scale_a, transpose: true}",
        "scales of input 'b' of test case of op 'scaled_mm' names 'scale_a', already assigned by "
        "another quantized input, expected each argument assigned once in a case",
        "scales: scale_a, transpose: true}",
    ),
    (
        "quantize-zeros-equal-to-scales",
        "scales: scale_a, zeros: azp",
        "scales: scale_a, zeros: scale_a",
        "zeros of input 'a' of test case of op 'scaled_mm' names 'scale_a', already assigned by "
        "another quantized input",
        "zeros: scale_a",
    ),
    (
        "quantize-asymmetric-without-zeros",
        "scales: scale_a, zeros: azp}",
        "scales: scale_a}",
        "input 'a' of test case of op 'scaled_mm' has no 'zeros', which scheme 'int8_token_asym' "
        "makes, expected zeros: the Tensor argument that gets the zero points",
        "scheme: int8_token_asym, scales: scale_a}",
    ),
    (
        "quantize-zeros-for-a-symmetric-scheme",
        "scales: scale_b, transpose: true}",
        "scales: scale_b, zeros: azp_adj, transpose: true}",
        "input 'b' of test case of op 'scaled_mm' has 'zeros' but scheme 'int8_channel' is "
        "symmetric, expected 'zeros' only with a scheme that makes zero points: int8_token_asym",
        "zeros: azp_adj",
    ),
    (
        "quantize-zero-dimension",
        "quantize: [16, 64], scheme: int8_channel",
        "quantize: [16, 0], scheme: int8_channel",
        "dimension 0 in input 'b' of test case of op 'scaled_mm', expected a positive integer",
        "quantize: [16, 0]",
    ),
    (
        "quantize-rank-the-scheme-does-not-take",
        "quantize: [16, 64], scheme: int8_channel",
        "quantize: [16], scheme: int8_channel",
        "input 'b' of test case of op 'scaled_mm' has shape [16], which scheme 'int8_channel' "
        "does not quantise, expected a shape [N, K]",
        "quantize: [16], scheme",
    ),
    (
        "quantize-transpose-of-3d",
        "quantize: [16, 64], scheme: fp8_block",
        "quantize: [2, 16, 64], scheme: fp8_block",
        "input 'b' of test case of op 'scaled_mm' has transpose: true and shape [2, 16, 64], "
        "expected transpose only for a 2-D shape",
        "transpose: true}}",
    ),
    (
        "quantize-transpose-not-a-boolean",
        "transpose: true}}",
        "transpose: yes please}}",
        "transpose of input 'b' of test case of op 'scaled_mm' is the string 'yes please', "
        "expected true or false",
        "transpose: yes please",
    ),
    (
        "quantize-unknown-key",
        "scale: 0.5}",
        "std: 0.5}",
        "unknown key 'std' in input 'a' of test case of op 'scaled_mm', expected one of quantize, "
        "scheme, group, scales, zeros, transpose, scale",
        "std: 0.5",
    ),
    (
        "float8-not-a-dtype-under-test",
        "dtypes: [bfloat16]\n      round_trip",
        "dtypes: [float8_e4m3fn]\n      round_trip",
        "unknown dtype 'float8_e4m3fn' in tests of op 'scaled_mm', expected one of float32",
        "dtypes: [float8_e4m3fn]",
    ),
    (
        "derive-not-a-function-path",
        "derive: quant.column_sums",
        "derive: column_sums",
        "derive of input 'azp_adj' of test case of op 'scaled_mm' is 'column_sums', expected "
        "module.function under the reference backend's impl/ package",
        "derive: column_sums",
    ),
    (
        "derive-with-another-key",
        "derive: quant.column_sums}",
        "derive: quant.column_sums, shape: [1, 16]}",
        "unknown key 'shape' in input 'azp_adj' of test case of op 'scaled_mm', expected one of "
        "derive",
        "derive: quant.column_sums, shape",
    ),
    (
        "round-trip-not-a-function-path",
        "fn: quant.scaled_mm_round_trip",
        "fn: scaled_mm_round_trip",
        "fn of round_trip of op 'scaled_mm' is 'scaled_mm_round_trip', expected module.function",
        "fn: scaled_mm_round_trip",
    ),
    (
        "round-trip-without-tolerances",
        "        tolerances:\n          bfloat16: {atol: 0.5, rtol: 5.0e-2}\n",
        "",
        "round_trip of op 'scaled_mm' has no 'tolerances', expected tolerances: {dtype: ",
        "        fn: quant.scaled_mm_round_trip",
    ),
    (
        "round-trip-lacks-a-dtype",
        "        tolerances:\n          bfloat16: {atol: 0.5, rtol: 5.0e-2}\n",
        "        tolerances: {}\n",
        "tolerances of round_trip of op 'scaled_mm' lack dtype 'bfloat16', expected a tolerance "
        "for each of the op's dtypes: bfloat16",
        "        tolerances: {}",
    ),
    (
        "round-trip-dtype-not-tested",
        "          bfloat16: {atol: 0.5, rtol: 5.0e-2}\n",
        "          bfloat16: {atol: 0.5, rtol: 5.0e-2}\n          float32: {atol: 1, rtol: 0}\n",
        "tolerances of round_trip of op 'scaled_mm' name dtype 'float32', which the op is not "
        "tested in, expected one of the op's dtypes: bfloat16",
        "          float32: {atol: 1, rtol: 0}",
    ),
    (
        "round-trip-unknown-key",
        "        fn: quant.scaled_mm_round_trip\n",
        "        fn: quant.scaled_mm_round_trip\n        cases: all\n",
        "unknown key 'cases' in round_trip of op 'scaled_mm', expected one of fn, tolerances",
        "        cases: all",
    ),
    (
        "round-trip-without-a-quantized-case",
        "      dtypes: [bfloat16]\n      cases:\n        - inputs: {x: [3, 16], dest: [3, 16]}",
        "      dtypes: [bfloat16]\n      round_trip: {fn: act.scale_round_trip,\n"
        "                   tolerances: {bfloat16: {atol: 1, rtol: 0}}}\n"
        "      cases:\n        - inputs: {x: [3, 16], dest: [3, 16]}",
        "op 'scale_into' has a round_trip but no case with a quantized input, expected a case "
        "input like {quantize: [M, K], scheme: int8_token, scales: <argument>}",
        "round_trip: {fn: act.scale_round_trip",
    ),
    (
        "supports-unknown-argument",
        "      fast: act.scale_into",
        "      fast: {fn: act.scale_into, supports: {factr: [2.0]}}",
        "supports of impl 'fast' of op 'scale_into' names 'factr', which is not an argument",
        "supports: {factr",
    ),
    (
        "supports-wrong-value-type",
        "      fast: act.scale_into",
        "      fast: {fn: act.scale_into, supports: {factor: [fast]}}",
        "values of 'factor' in supports of impl 'fast' of op 'scale_into': 'fast' is not a "
        "value of float",
        "supports: {factor",
    ),
    (
        "supports-required-tensor",
        "      fast: act.scale_into",
        "      fast: {fn: act.scale_into, supports: {x: [null]}}",
        "x is a Tensor the op always takes",
        "supports: {x",
    ),
    (
        "supports-empty-list",
        "      fast: act.scale_into",
        "      fast: {fn: act.scale_into, supports: {factor: []}}",
        "is an empty list",
        "supports: {factor",
    ),
    (
        "supports-not-a-list",
        "      fast: act.scale_into",
        "      fast: {fn: act.scale_into, supports: {factor: 2.0}}",
        "values of 'factor' in supports of impl 'fast' of op 'scale_into' is",
        "supports: {factor",
    ),
    (
        "supports-null-for-required-scalar",
        "      fast: act.scale_into",
        "      fast: {fn: act.scale_into, supports: {factor: [null]}}",
        "None is not a value of float",
        "supports: {factor",
    ),
    (
        "supports-duplicate-value",
        "      fast: act.scale_into",
        "      fast: {fn: act.scale_into, supports: {factor: [2.0, 2.0]}}",
        "2.0 is listed twice",
        "supports: {factor",
    ),
    (
        "supports-empty",
        "      fast: act.scale_into",
        "      fast: {fn: act.scale_into, supports: {}}",
        "supports of impl 'fast' of op 'scale_into' is empty",
        "supports: {}",
    ),
    ("empty-manifest", VALID, "", "the manifest is empty", None),
    # subclasses: vLLM subclasses of the layer that compute what it computes
    (
        "subclass-not-dotted",
        "      - vllm.model_executor.layers.layernorm.ScaledRMSNorm\n",
        "      - vllm.model_executor.layers.layer-norm.ScaledRMSNorm\n",
        "entry of subclasses of op 'rms_norm' 'vllm.model_executor.layers.layer-norm.ScaledRMSNorm' "
        "is not a dotted Python name",
        "layer-norm.ScaledRMSNorm",
    ),
    (
        "subclass-without-module",
        "      - vllm.model_executor.layers.layernorm.ScaledRMSNorm\n",
        "      - ScaledRMSNorm\n",
        "entry of subclasses of op 'rms_norm' 'ScaledRMSNorm' has no module",
        "      - ScaledRMSNorm",
    ),
    (
        "subclass-not-a-class",
        "      - vllm.model_executor.layers.layernorm.ScaledRMSNorm\n",
        "      - vllm.model_executor.layers.layernorm.scaled_rms_norm\n",
        "entry of subclasses of op 'rms_norm' 'vllm.model_executor.layers.layernorm.scaled_rms_norm' "
        "does not name a class",
        "layernorm.scaled_rms_norm",
    ),
    (
        "subclass-outside-vllm",
        "      - vllm.model_executor.layers.layernorm.ScaledRMSNorm\n",
        "      - mypkg.norms.ScaledRMSNorm\n",
        "entry of subclasses of op 'rms_norm' 'mypkg.norms.ScaledRMSNorm' lies outside 'vllm'",
        "mypkg.norms.ScaledRMSNorm",
    ),
    (
        "subclass-is-the-layer",
        "      - vllm.model_executor.layers.layernorm.ScaledRMSNorm\n",
        "      - vllm.model_executor.layers.layernorm.RMSNorm\n",
        "entry of subclasses of op 'rms_norm' 'vllm.model_executor.layers.layernorm.RMSNorm' has the "
        "name of the layer",
        "      - vllm.model_executor.layers.layernorm.RMSNorm",
    ),
    (
        "subclass-twice",
        "      - vllm.model_executor.layers.layernorm.ScaledRMSNorm\n",
        "      - vllm.model_executor.layers.layernorm.ScaledRMSNorm\n"
        "      - vllm.model_executor.layers.other.ScaledRMSNorm\n",
        "entry of subclasses of op 'rms_norm' 'vllm.model_executor.layers.other.ScaledRMSNorm' is "
        "listed already",
        "layers.other.ScaledRMSNorm",
    ),
    (
        "subclass-of-another-ops-layer",
        "      - vllm.model_executor.layers.layernorm.ScaledRMSNorm\n",
        "      - vllm.model_executor.layers.activation.SiluAndMul\n",
        "op 'rms_norm' replaces SiluAndMul, already replaced by op 'silu_and_mul'",
        "      - vllm.model_executor.layers.activation.SiluAndMul",
    ),
    (
        "subclass-module-name-clash",
        "      - vllm.model_executor.layers.layernorm.ScaledRMSNorm\n",
        "      - vllm.model_executor.models.layernorm.ScaledRMSNorm\n",
        "subclass module vllm.model_executor.models.layernorm of op 'rms_norm' ends like "
        "vllm.model_executor.layers.layernorm",
        "models.layernorm.ScaledRMSNorm",
    ),
    (
        "subclasses-not-a-list",
        "    subclasses:\n      - vllm.model_executor.layers.layernorm.ScaledRMSNorm\n"
        "      - vllm.model_executor.models.transformers.fusers.rms_norm.TPAwareRMSNorm\n",
        "    subclasses: vllm.model_executor.layers.layernorm.ScaledRMSNorm\n",
        "subclasses of op 'rms_norm' is the string",
        "    subclasses: vllm",
    ),
    (
        "subclasses-without-layer",
        "    doc: The attention backend class path.\n",
        "    doc: The attention backend class path.\n"
        "    subclasses: [vllm.model_executor.layers.layernorm.ScaledRMSNorm]\n",
        "op 'pick_backend' has 'subclasses' but no 'layer', expected 'subclasses' only for ops "
        "with a layer",
        "    subclasses: [vllm",
    ),
    (
        "layer-optional-without-layer",
        "    doc: The attention backend class path.\n",
        "    doc: The attention backend class path.\n    layer_optional: false\n",
        "op 'pick_backend' has 'layer_optional' but no 'layer', expected 'layer_optional' only "
        "for ops with a layer",
        "    layer_optional: false",
    ),
    (
        "layer-optional-not-a-bool",
        "    layer_optional: true\n",
        "    layer_optional: maybe\n",
        "layer_optional of op 'gelu_tanh'",
        "    layer_optional: maybe",
    ),
]


CASES += [
    (
        "tensor-list-outside-a-collective",
        "    signature: scale_into(Tensor x, Tensor dest, float factor=2.0) -> None\n",
        "    signature: scale_into(Tensor[] x, Tensor dest, float factor=2.0) -> None\n",
        "op 'scale_into' takes or returns a Tensor[] but replaces no communicator method, "
        "expected Tensor[] only in the signature of an op with 'collective:'",
        "    signature: scale_into(Tensor[] x",
    ),
    (
        "optional-type-in-a-union",
        "    signature: all_reduce(Tensor input_) -> Tensor\n",
        "    signature: all_reduce(Tensor|Tensor[]? input_) -> Tensor\n",
        "Tensor[]? in the union Tensor|Tensor[]? is optional; a union takes no None",
        "    signature: all_reduce(Tensor|",
    ),
    (
        "tensor-list-input-given-as-a-shape",
        "    signature: all_reduce(Tensor input_) -> Tensor\n",
        "    signature: all_reduce(Tensor[] input_) -> Tensor\n",
        "tensor 0 of input 'input_' of test case of op 'all_reduce' is the integer 4, expected "
        "a list of tensor inputs",
        "        - inputs: {input_: [4, 6]}",
    ),
    (
        "per-rank-input-of-one-rank",
        "        - inputs: {input_: [4, 6]}\n",
        "        - inputs: {input_: {per_rank: [[4, 6]]}}\n",
        "per_rank of input 'input_' of test case of op 'all_reduce' gives 1 input(s), expected "
        "{per_rank: [...]} with one input per rank (2 ranks)",
        "        - inputs: {input_: {per_rank",
    ),
    (
        "per-rank-input-outside-a-collective",
        "        - inputs: {x: [3, 16], dest: [3, 16]}\n",
        "        - inputs: {x: {per_rank: [[3, 16], [2, 16]]}, dest: [3, 16]}\n",
        "input 'x' of a test case of op 'scale_into' is per_rank, but the op is no collective, "
        "expected the same input for the one process",
        "        - inputs: {x: {per_rank",
    ),
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

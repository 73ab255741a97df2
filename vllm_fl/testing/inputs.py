"""The test-input forms of ``ops.yaml`` as the generated parity tests build them: a random
tensor, a quantized input and a derived one.

Shared by the compile and opcheck tests' samples (``tests/support/layer_samples.py``) and the
benchmarks' cases (``benchmarks/cases.py``), which give these forms their own shapes (the test
case's, or the model's). Plain PyTorch on the CPU; the caller moves the results.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence

import torch

from vllm_fl.testing.quantize import quantize

#: the package whose modules hold the functions of a derived input
REFERENCE_IMPL = "vllm_fl.backends.reference.impl"


def draw_tensor(item: Mapping, dtype: torch.dtype, generator: torch.Generator) -> torch.Tensor:
    """A tensor input of a generated test's case (``{shape, dtype, high | scale}`` or
    ``{values, dtype}``), its ``$dtype`` being ``dtype``: the given values, integers in
    [0, high), or normal values (times ``scale``) drawn from ``generator``."""
    given = dtype if item["dtype"] == "$dtype" else getattr(torch, item["dtype"])
    if "values" in item:
        return torch.tensor(item["values"], dtype=given)
    if not given.is_floating_point:
        return torch.randint(0, item["high"], item["shape"], generator=generator, dtype=given)
    noise = torch.randn(item["shape"], generator=generator)
    return (noise * item.get("scale", 1.0)).to(given)


def quantized_input(
    name: str,
    shape: Sequence[int],
    scheme: str,
    scales: str,
    group: Sequence[int] | None = None,
    zeros: str | None = None,
    transpose: bool = False,
    scale: float | None = None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """A quantized input ``{quantize: shape, scheme, group, scales, zeros, transpose, scale}``:
    a normal float32 tensor of ``shape`` (standard deviation ``scale``, default 1) drawn from
    ``generator`` and quantised with ``vllm_fl.testing.quantize.SCHEMES[scheme]``.

    Returns the original (float32, transposed as the input is) and the arguments it sets:
    ``name`` the quantised values (their ``.t()`` with ``transpose``), ``scales`` the scales and
    ``zeros`` (asymmetric schemes) the zero points. The keywords are the fields of
    ``codegen.model.QuantizedInput``, so ``quantized_input(name, **asdict(item))`` builds one."""
    original = torch.randn(*shape, generator=generator) * (1.0 if scale is None else scale)
    quantized = quantize(original, scheme, None if group is None else tuple(group))
    q = quantized.q
    if transpose:
        original, q = original.t(), q.t()
    arguments = {name: q, scales: quantized.scales}
    if zeros is not None:
        arguments[zeros] = quantized.zeros
    return original, arguments


def derived_input(module: str, function: str, arguments: Mapping[str, object]) -> object:
    """A derived input ``{derive: module.function}``: that function of the reference backend's
    impl package applied to the case's other arguments (name -> value, as built)."""
    fn = getattr(importlib.import_module(f"{REFERENCE_IMPL}.{module}"), function)
    return fn(dict(arguments))

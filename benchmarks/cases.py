"""Every op's benchmark inputs, built from its test cases in ops.yaml at model size.

A test case gives the argument structure: which arguments are tensors (shape, dtype, integer
bound, scale), which are literals, and the constructor arguments of the op's vLLM layer.
shapes.OP_SIZES says which of the case's numbers stand for which model size; the case's token
count becomes the benchmark's. A quantized input (`{quantize: shape, scheme, ...}`) scales like
a tensor, its scales and zero points following from its shape, and a derived one
(`{derive: module.function}`) is computed from the other arguments at the benchmark's size, both
as the parity tests build them (`vllm_fl.testing.inputs`). A case that gives some tensor by its
values (sequence lengths and their offsets, which must agree with the other inputs) cannot be
scaled: it runs at its own token count only (`BenchCase.fixed_tokens`). `bench_cases(op)`
returns one `BenchCase` per benchmarked test case, named after the op, or the op plus the
optional arguments it adds (`rms_norm+residual`) or leaves out (`rotary_embedding-key`) compared
with the op's first one.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import asdict, dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from benchmarks.shapes import OP_SIZES, OpSizes
from vllm_fl.testing.models import ModelShape

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "ops.yaml"
DTYPE_PLACEHOLDER = "$dtype"
#: floating-point values drawn per tensor at most (larger tensors repeat them)
RANDOM_BLOCK = 1 << 22


class BenchShapeError(ValueError):
    """shapes.OP_SIZES does not fit the manifest (an op, case index or number it lacks)."""


@dataclass(frozen=True)
class TensorSpec:
    """A tensor argument at benchmark size; dtype is a torch dtype name or "$dtype"."""

    shape: tuple[int, ...]
    dtype: str
    high: int | None = None  # integer tensors: values in [0, high)
    scale: float | None = None  # floating-point tensors: standard deviation (default 1)
    values: tuple | None = None  # the elements themselves (nested tuples), not random ones


@dataclass(frozen=True)
class Call:
    """What an impl is called with: `fn(layer, *args, **kwargs)`, or `fn(*args, **kwargs)` for
    an op without a layer (layer None)."""

    layer: Any
    args: tuple
    kwargs: dict

    def bind(self, fn):
        """A zero-argument callable running `fn` on these arguments."""
        args = self.args if self.layer is None else (self.layer, *self.args)
        kwargs = self.kwargs
        if kwargs:
            return lambda: fn(*args, **kwargs)
        return lambda: fn(*args)

    def values(self) -> list:
        """Every argument, positional then keyword."""
        return [*self.args, *self.kwargs.values()]


@dataclass(frozen=True)
class BenchCase:
    """One benchmarked test case of an op, scalable to any token count."""

    op: str
    name: str
    layer: str | None  # import path of the vLLM layer class; None for a function op
    model: ModelShape | None
    index: int  # the test case's index in ops.yaml
    _case: Any  # codegen.model.Case
    _sizes: OpSizes | None
    _tokens: int  # the test case's own token count
    _arguments: tuple[str, ...]  # the arguments the case passes, in signature order
    _positional: bool  # the given arguments are the signature's first ones

    def init(self, tokens: int = 1) -> dict[str, object]:
        """The layer's constructor arguments ("$dtype" left for the caller)."""
        return {name: self._value(value, tokens) for name, value in self._case.init}

    @property
    def fixed_tokens(self) -> int | None:
        """The case's own token count where it gives a tensor by its values (then it runs at
        that count only), else None."""
        given = any(getattr(item, "values", None) is not None for _, item in self._case.inputs)
        return self._tokens if given else None

    def inputs(self, tokens: int) -> dict[str, object]:
        """The case's inputs at `tokens` tokens, in signature order: TensorSpecs, literals, and
        the generator's `QuantizedInput` (at the benchmark's shape; it also sets the arguments
        of its scales and zero points) and `DerivedInput` (codegen.model)."""
        if self.fixed_tokens is not None and tokens != self.fixed_tokens:
            raise BenchShapeError(
                f"{self.name} (ops.yaml case {self.index}) gives tensors by their values: it runs "
                f"at its own {self.fixed_tokens} token(s) only, not {tokens}"
            )
        model = _codegen_model()
        out: dict[str, object] = {}
        for name, item in self._case.inputs:
            if isinstance(item, model.TensorInput) and item.values is not None:
                out[name] = TensorSpec(item.shape, item.dtype, values=item.values)
            elif isinstance(item, model.TensorInput):
                high = None if item.high is None else self._value(item.high, tokens)
                out[name] = TensorSpec(
                    self._shape(name, item.shape, tokens), item.dtype, high, item.scale
                )
            elif isinstance(item, model.QuantizedInput):
                out[name] = replace(item, shape=self._shape(name, item.shape, tokens))
            elif isinstance(item, model.DerivedInput):
                out[name] = item
            else:
                out[name] = self._value(item.value, tokens)
        return out

    def build(self, tokens: int, dtype, device: str, seed: int | None = None) -> Call:
        """The layer (vLLM's class, as its platform builds it) and the arguments at `tokens`
        tokens, floating-point values in `dtype`.

        Values are drawn on the CPU from a generator seeded with `seed` (default: the token
        count) and then moved: a failed CUDA-graph capture of one backend must not leave the
        device's generator unusable for the next case."""
        import torch

        gen = torch.Generator().manual_seed(tokens if seed is None else seed)
        values = self._values(tokens, dtype, device, gen)
        layer = None
        if self.layer is not None:
            layer = make_layer(self.layer, self.init(tokens), dtype, device, gen)
        return self.call(layer, values)

    def arguments(self, tokens: int, dtype, device: str, seed: int | None = None) -> Call:
        """The arguments as `build` draws them, for a `layer` the caller builds (None here)."""
        import torch

        gen = torch.Generator().manual_seed(tokens if seed is None else seed)
        return self.call(None, self._values(tokens, dtype, device, gen))

    def call(self, layer, values: dict[str, object]) -> Call:
        """`values` (argument name -> value) as a call, positional where the signature allows."""
        if self._positional:
            return Call(layer, tuple(values.values()), {})
        return Call(layer, (), dict(values))

    def _values(self, tokens: int, dtype, device: str, gen) -> dict[str, object]:
        """The arguments in signature order, drawn in the case's order (as the parity tests
        draw them), derived ones computed from the others on the CPU."""
        import torch

        from vllm_fl.testing.inputs import derived_input, quantized_input

        model = _codegen_model()
        values: dict[str, object] = {}
        derived: dict[str, object] = {}
        for name, spec in self.inputs(tokens).items():
            if isinstance(spec, model.QuantizedInput):
                values.update(quantized_input(name, generator=gen, **asdict(spec))[1])
                continue
            if isinstance(spec, model.DerivedInput):
                derived[name] = spec
                continue
            if not isinstance(spec, TensorSpec):
                values[name] = spec
                continue
            spec_dtype = dtype if spec.dtype == DTYPE_PLACEHOLDER else getattr(torch, spec.dtype)
            if spec.values is not None:
                tensor = torch.tensor(spec.values, dtype=spec_dtype)
            elif spec_dtype.is_floating_point:
                numel = math.prod(spec.shape)
                block = torch.randn(min(numel, RANDOM_BLOCK), generator=gen)
                if spec.scale is not None:
                    block *= spec.scale
                block = block.to(spec_dtype)
                # a large tensor repeats one random block: kernel timings do not depend on the
                # values, and the host draws a billion normals only in seconds
                tensor = block.repeat(-(-numel // block.numel()))[:numel].view(spec.shape)
            else:
                tensor = torch.randint(0, spec.high, spec.shape, generator=gen, dtype=spec_dtype)
            values[name] = tensor
        for name, spec in derived.items():
            values[name] = derived_input(spec.module, spec.function, values)
        # a transposed weight keeps its strides: the impl sees the layout vLLM passes
        return {
            name: (
                values[name].to(device) if isinstance(values[name], torch.Tensor) else values[name]
            )
            for name in self._arguments
        }

    # -- scaling --------------------------------------------------------------------------------

    def _size(self, key: object, tokens: int):
        if self._sizes is None or isinstance(key, bool):
            return None
        fn = self._sizes.sizes.get(key)
        return None if fn is None else fn(self.model, tokens)

    def _value(self, value: object, tokens: int) -> object:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            scaled = self._size(value, tokens)
            if scaled is not None:
                return scaled
        return value

    def _shape(self, name: str, shape: tuple[int, ...], tokens: int) -> tuple[int, ...]:
        return tuple(self._dim(name, axis, dim, tokens) for axis, dim in enumerate(shape))

    def _dim(self, name: str, axis: int, dim: int, tokens: int) -> int:
        if axis == 0 and dim == self._tokens:
            return tokens
        scaled = self._size((name, axis), tokens)
        return scaled if scaled is not None else self._value(dim, tokens)


def make_layer(path: str, init: dict, dtype, device: str, gen=None):
    """vLLM's layer `path` (import path) built with `init` ("$dtype": `dtype`) as vLLM's platform
    builds it, floating-point parameters drawn from `gen` (no gradients), moved to `device`."""
    from vllm_fl.testing.parity import build_layer

    module, name = path.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)
    # as in vLLM's inference: no autograd bookkeeping in the timed calls
    return build_layer(cls, init, dtype, device, gen).requires_grad_(False)


# -- the manifest ---------------------------------------------------------------------------------


def _codegen_model():
    """The generator's model module (codegen.model): a module of the checkout, as the manifest
    is, imported where first needed."""
    from codegen import model

    return model


@cache
def manifest():
    """ops.yaml, loaded and checked by the generator's loader."""
    from codegen.manifest import load_manifest

    return load_manifest(MANIFEST.read_text(), MANIFEST.name)


def bench_cases(op_name: str) -> list[BenchCase]:
    """The benchmark cases of `op_name`; empty for an op ops.yaml lacks or gives no test cases,
    and for a collective (one process cannot run it: benchmarks.multi_gpu measures them)."""
    op = next((o for o in manifest().ops if o.name == op_name), None)
    if op is None or op.tests is None or op.collective is not None:
        return []
    sizes = OP_SIZES.get(op_name)
    cases = op.tests.cases
    indices = _selected(op_name, cases, sizes)
    model = None if sizes is None else sizes.shape()
    first_given = _given(cases[indices[0]])
    out = []
    for index in indices:
        case = cases[index]
        given = _given(case)
        name = op_name + "".join(f"+{a}" for a in op.schema.arg_names if a in given - first_given)
        name += "".join(f"-{a}" for a in op.schema.arg_names if a in first_given - given)
        arguments = tuple(a for a in op.schema.arg_names if a in _arguments(case))
        out.append(
            BenchCase(
                op=op_name,
                name=name,
                layer=None if op.layer is None else op.layer.path,
                model=model,
                index=index,
                _case=case,
                _sizes=sizes,
                _tokens=_case_tokens(case),
                _arguments=arguments,
                _positional=arguments == op.schema.arg_names[: len(arguments)],
            )
        )
    if sizes is not None:
        _check_sizes(op_name, sizes, [c._case for c in out])
    return out


def _arguments(case) -> set[str]:
    """The arguments a case passes: its inputs and those its quantized inputs set."""
    return {n for n, _ in case.inputs} | {
        n for _, item in case.inputs for n in getattr(item, "sets", ())
    }


def _given(case) -> set[str]:
    """The arguments a case passes (a literal None does not count)."""
    literal = _codegen_model().LiteralInput
    nones = {n for n, item in case.inputs if isinstance(item, literal) and item.value is None}
    return _arguments(case) - nones


def _shaped(item) -> bool:
    model = _codegen_model()
    return isinstance(item, (model.TensorInput, model.QuantizedInput))


def _case_tokens(case) -> int | None:
    for _, item in case.inputs:
        if _shaped(item) and item.shape:
            return item.shape[0]
    return None


def _selected(op_name: str, cases, sizes: OpSizes | None) -> list[int]:
    if sizes is not None and sizes.cases is not None:
        bad = [i for i in sizes.cases if not 0 <= i < len(cases)]
        if bad:
            raise BenchShapeError(
                f"shapes.OP_SIZES[{op_name!r}].cases: {bad} out of range; ops.yaml has "
                f"{len(cases)} test case(s) for {op_name!r} (indices 0 to {len(cases) - 1})"
            )
        return list(sizes.cases)
    seen: dict[frozenset[str], int] = {}
    for index, case in enumerate(cases):
        seen.setdefault(frozenset(_given(case)), index)
    return sorted(seen.values())


def _check_sizes(op_name: str, sizes: OpSizes, cases) -> None:
    """Every key of `sizes` must occur in every benchmarked case: a number that no longer does
    means ops.yaml changed under the table."""
    for case in cases:
        numbers: set[object] = set()
        for _, value in case.init:
            numbers.add(value)
        for name, item in case.inputs:
            if _shaped(item):
                numbers.update(item.shape)
                numbers.update((name, axis) for axis in range(len(item.shape)))
                numbers.add(getattr(item, "high", None))
            elif isinstance(item, _codegen_model().LiteralInput):
                numbers.add(item.value)
        numbers = {n for n in numbers if not isinstance(n, bool)}
        missing = [key for key in sizes.sizes if key not in numbers]
        if missing:
            raise BenchShapeError(
                f"shapes.OP_SIZES[{op_name!r}]: {', '.join(map(repr, missing))} not in the test "
                f"case of {op_name!r} at ops.yaml:{case.line}; make the table match the case"
            )

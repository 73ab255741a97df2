"""The machinery of the generated parity tests: `Parity`, what their ``parity`` fixture gives.

The generator renders a ``conftest.py`` next to the parity tests (``tests/generated`` of this
repository and of an out-of-tree vendor package) whose fixture constructs a `Parity` with the
manifest's reference impl and the tests' seed. Imports pytest and torch.

A case is ``{"init": {...}, "inputs": {...}}``: ``init`` holds the layer's constructor arguments
(``"$dtype"`` stands for the dtype under test); an input is ``{"shape": ..., "dtype": ...}`` for a
tensor (``"$dtype"``: the dtype under test; integer dtypes draw from ``[0, high)``, floating ones
from a normal distribution of standard deviation ``scale``, default 1, cast to the dtype, FP8
included; with ``"values"`` the tensor holds those elements) or ``{"value": ...}`` for a literal.

A quantized input, ``{"quantize": shape, "scheme": ..., "group": ..., "scales": arg, "zeros":
arg, "transpose": bool, "scale": std}``, draws a normal float32 tensor (never cast to the dtype
under test), quantises it with ``vllm_fl.testing.quantize.SCHEMES[scheme]`` and gives the input
the quantised values (their ``.t()`` with ``transpose``), the argument ``scales`` the float32
scales and ``zeros`` the int32 zero points; the unquantised tensor (transposed alike) is the
input's original, what a round trip compares with. A derived input, ``{"derive":
"module:function"}``, is that function of the other arguments once they are built.
"""

from __future__ import annotations

import contextlib
import importlib
from types import SimpleNamespace

import pytest
import torch

from vllm_fl.testing.inputs import draw_tensor

#: the reference against vLLM's own code: the same operations in the same dtypes, bit for bit
EXACT = {"atol": 0, "rtol": 0}


@contextlib.contextmanager
def _default_dtype(dtype):
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def build_layer(cls, init: dict, dtype, device, generator=None) -> torch.nn.Module:
    """vLLM's layer class ``cls`` built with ``init`` (``"$dtype"``: ``dtype``) as vLLM's platform
    and one-process workers build it, its floating-point parameters drawn from ``generator``,
    moved to ``device``."""
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.platforms import current_platform

    from vllm_fl.distributed.single_process import init_single_process

    # as vLLM's platform does at start-up: some layers look their kernels up in torch.ops._C
    # when constructed
    current_platform.import_kernels()
    kwargs = {key: dtype if value == "$dtype" else value for key, value in init.items()}
    # the layer's parameters in `dtype`, as vLLM's loader does
    with set_current_vllm_config(VllmConfig()), _default_dtype(dtype):
        # as vLLM's one-process workers have it: some layers read the tensor-parallel size
        # and rank when constructed (the Mamba2 mixer's norm)
        init_single_process()
        layer = cls(**kwargs)
    with torch.no_grad():
        for _, param in sorted(layer.named_parameters()):
            if param.is_floating_point():
                param.copy_(torch.randn(param.shape, generator=generator).to(param.dtype))
    return layer.to(device)


def _clone(value):
    return value.clone() if isinstance(value, torch.Tensor) else value


def _to(value, device):
    # a transposed view keeps its strides: an impl sees the layout vLLM passes
    return value.to(device) if isinstance(value, torch.Tensor) else value


def _function(path):
    """``package.module:function`` -> the function."""
    module, _, function = path.partition(":")
    return getattr(importlib.import_module(module), function)


#: dtypes compared after a cast to float32 (assert_close has no FP8 arithmetic)
_FLOAT8 = {torch.float8_e4m3fn, torch.float8_e5m2}


def _float32(value):
    """Every tensor of a result as float32 (a round trip compares in full precision)."""
    if isinstance(value, (tuple, list)):
        return type(value)(_float32(v) for v in value)
    if isinstance(value, torch.Tensor):
        return value.float().cpu()
    return value


#: the signature's base types (an int is a valid float, a bool is no int)
_TYPES = {"Tensor": torch.Tensor, "int": int, "float": (int, float), "bool": bool, "str": str}


def _affine(layer, weight_dtype: str) -> dict[str, torch.Tensor]:
    """The layer's ``weight`` and ``bias`` that it has as tensors (a layer without an elementwise
    affine has neither), in ``weight_dtype``: vLLM keeps both of a norm in one dtype, float32
    under half-precision activations for some layers (``LayerNorm(dtype=torch.float32)``)."""
    dtype = getattr(torch, weight_dtype)
    out = {}
    for name in ("weight", "bias"):
        value = getattr(layer, name, None)
        if isinstance(value, torch.Tensor):
            out[name] = value.detach().to(dtype)
    return out


def _has_form(value, form):
    """Whether ``value`` has the return ``form`` of the op's signature, written as in ops.yaml:
    ``None``, ``Tensor``, ``Tensor?``, ``(Tensor, Tensor?)``, ``int``, ..."""
    if form.startswith("("):
        parts = form[1:-1].split(", ")
        return (
            isinstance(value, tuple)
            and len(value) == len(parts)
            and all(_has_form(v, p) for v, p in zip(value, parts))
        )
    if form == "None":
        return value is None
    if form.endswith("?"):
        return value is None or _has_form(value, form[:-1])
    return isinstance(value, _TYPES[form]) and not (form != "bool" and isinstance(value, bool))


def _describe(value):
    if isinstance(value, tuple):
        return "(" + ", ".join(_describe(v) for v in value) + ")"
    if isinstance(value, torch.Tensor):
        return f"Tensor[{tuple(value.shape)}, {value.dtype}]"
    return type(value).__name__ if value is not None else "None"


def _custom_op_class(module: str, name: str) -> type:
    """vLLM's CustomOp ``module.name``; the test is skipped where this vLLM has no such CustomOp
    (an ops.yaml ``layer_optional`` layer: vLLM 0.24 has no GELUTanh, and its LayerNorm is a
    plain ``nn.Module`` taking other arguments), as registration leaves the op out there."""
    import vllm
    from vllm.model_executor.custom_op import CustomOp

    cls = getattr(importlib.import_module(module), name, None)
    if not (isinstance(cls, type) and issubclass(cls, CustomOp)):
        found = "no such class" if cls is None else "not a CustomOp"
        pytest.skip(f"{module}.{name}: {found} in vLLM {vllm.__version__}; the op replaces nothing")
    return cls


class Parity:
    """Builds layers and inputs deterministically, runs implementations and compares them with
    the ``reference`` impl (its id, e.g. ``reference.torch``); the layers' weights and the cases'
    inputs are drawn from generators seeded with ``seed``."""

    def __init__(self, reference: str, seed: int):
        self.reference = reference
        self.seed = seed

    def impl(self, op, impl_id):
        from vllm_fl.dispatch import get_default_manager

        for impl in get_default_manager().registry.get_implementations(op):
            if impl.impl_id == impl_id:
                return impl
        pytest.fail(f"{impl_id!r} is not registered for op {op!r}: run `make codegen`")

    def require_available(self, impl):
        available = impl.available
        if available is not None and not available():
            reason = getattr(available, "reason", None) or "availability check returned False"
            pytest.skip(f"{impl.impl_id} unavailable: {reason}")

    def require_served(self, impl, layer, inputs):
        """Skip a case whose arguments ``impl`` declares it does not serve (ops.yaml
        ``supports``): selection passes such a call to the next implementation."""
        refusal = getattr(impl, "refusal", None)
        why = refusal((layer,) if layer is not None else (), inputs) if refusal else None
        if why is not None:
            pytest.skip(f"{impl.impl_id} does not serve this case: {why} (ops.yaml supports)")

    def layer(self, path, init, dtype, device):
        if path is None:
            return None
        module, name = path.rsplit(".", 1)
        cls = _custom_op_class(module, name)
        return build_layer(cls, init, dtype, device, torch.Generator().manual_seed(self.seed))

    def inputs(self, spec, dtype, device):
        return self.build(spec, dtype, device)[0]

    def build(self, spec, dtype, device):
        """The arguments of a case, and the originals of its quantized inputs (float32, before
        quantisation, on the CPU), drawn in the case's order from one seeded generator."""
        generator = torch.Generator().manual_seed(self.seed + 1)
        values, originals, derived = {}, {}, {}
        for name, item in spec.items():
            if "value" in item:
                values[name] = item["value"]
            elif "derive" in item:
                derived[name] = item["derive"]
            elif "quantize" in item:
                original, assigned = self._quantized(item, generator)
                originals[name] = original
                values.update({key: value for key, value in assigned.items() if key != "q"})
                values[name] = assigned["q"]
            else:
                values[name] = draw_tensor(item, dtype, generator)
        for name, path in derived.items():  # of the other arguments, as built
            values[name] = _function(path)(dict(values))
        return {name: _to(value, device) for name, value in values.items()}, originals

    def _quantized(self, item, generator):
        """(the float32 original, {"q": values, scales argument: scales, zeros argument:
        zeros})."""
        from vllm_fl.testing.quantize import SCHEMES

        noise = torch.randn(item["quantize"], generator=generator) * item.get("scale", 1.0)
        group = tuple(item["group"]) if "group" in item else None
        quantized = SCHEMES[item["scheme"]](noise, group)
        q = quantized.q
        if item.get("transpose", False):
            noise, q = noise.t(), q.t()
        assigned = {"q": q, item["scales"]: quantized.scales}
        if "zeros" in item:
            assigned[item["zeros"]] = quantized.zeros
        return noise, assigned

    def call(self, impl, layer, inputs, mutates=()):
        """Run ``impl`` on clones of ``inputs``; it must not mutate or return them.

        An adapter with an in-place eager variant runs that variant outside torch.compile: the
        functional impl it calls under a trace (its ``functional`` attribute) is checked here.
        An op that writes into caller-provided tensors (``mutates``) returns None; its result is
        then the tuple of those tensors after the call, and no other input may change.
        """
        return self._run(impl, layer, inputs, mutates)[0]

    def _run(self, impl, layer, inputs, mutates=()):
        """``call``, returning the result and the arguments the impl received."""
        fn = getattr(impl.fn, "functional", impl.fn)
        args = {name: _clone(value) for name, value in inputs.items()}
        result = fn(layer, **args) if layer is not None else fn(**args)
        if mutates:
            assert result is None, f"{impl.impl_id} returned {type(result).__name__}, not None"
            result = tuple(args[name] for name in mutates)
        for name, value in args.items():
            if isinstance(value, torch.Tensor) and name not in mutates:
                assert torch.equal(value, inputs[name]), f"{impl.impl_id} mutated input {name!r}"
                outputs = result if isinstance(result, tuple) else (result,)
                assert all(
                    out is not value for out in outputs
                ), f"{impl.impl_id} returned its input {name!r} (impls must be functional)"
        return result, args

    def compare(self, actual, expected, tolerance):
        if isinstance(expected, (tuple, list)):
            assert isinstance(actual, (tuple, list)), f"expected a tuple, got {type(actual)}"
            assert len(actual) == len(expected), f"expected {len(expected)} results"
            for a, e in zip(actual, expected):
                self.compare(a, e, tolerance)
        elif isinstance(expected, torch.Tensor):
            assert isinstance(actual, torch.Tensor), f"expected a tensor, got {type(actual)}"
            if expected.dtype in _FLOAT8:
                assert actual.dtype == expected.dtype, f"{actual.dtype}, expected {expected.dtype}"
                actual, expected = actual.float(), expected.float()
            if expected.is_floating_point():
                torch.testing.assert_close(actual.cpu(), expected.cpu(), **tolerance)
            else:  # indices and counts: exactly
                torch.testing.assert_close(actual.cpu(), expected.cpu(), atol=0, rtol=0)
        else:
            assert actual == expected

    def check(
        self,
        op,
        layer_path,
        impl_id,
        device,
        dtype_name,
        case,
        tolerance,
        mutates=(),
        canonical=None,
    ):
        impl = self.impl(op, impl_id)
        self.require_available(impl)
        reference = self.impl(op, self.reference)
        dtype = getattr(torch, dtype_name)
        layer = self.layer(layer_path, case["init"], dtype, device)
        inputs = self.inputs(case["inputs"], dtype, device)
        self.require_served(impl, layer, inputs)
        expected = self.call(reference, layer, inputs, mutates)
        expected_form = self.canonical(canonical, expected, inputs, mutates)
        # Twice on the same layout: the second call runs on what the first one cached
        # (compiled kernels, launch plans) and must match as well.
        for _ in range(2):
            actual = self.call(impl, layer, inputs, mutates)
            self.compare(
                self.canonical(canonical, actual, inputs, mutates), expected_form, tolerance
            )

    def canonical(self, canonical, result, inputs, mutates):
        """The canonical form of a result where the op leaves parts of its outputs open (order,
        padding): of the arguments after the call (ops with mutates) or of the result and the
        inputs. Without ``canonical``, the result itself."""
        if canonical is None:
            return result
        form = _function(canonical)
        if mutates:
            return form(**{**inputs, **dict(zip(mutates, result))})
        return form(result, **inputs)

    def check_round_trip(
        self, op, layer_path, impl_id, device, dtype_name, case, round_trip, tolerance, mutates=()
    ):
        """On a case with quantized inputs, ``impl_id`` approximates the full-precision result:
        ``round_trip(originals, arguments)`` of the unquantised inputs (float32, on the CPU) and
        the arguments as passed (their scales, bias, ...), compared in float32."""
        impl = self.impl(op, impl_id)
        self.require_available(impl)
        dtype = getattr(torch, dtype_name)
        layer = self.layer(layer_path, case["init"], dtype, device)
        inputs, originals = self.build(case["inputs"], dtype, device)
        assert originals, f"case {case} has no quantized input"
        self.require_served(impl, layer, inputs)
        arguments = {name: _to(value, "cpu") for name, value in inputs.items()}
        expected = _function(round_trip)(originals, arguments)
        actual = self.call(impl, layer, inputs, mutates)
        self.compare(_float32(actual), _float32(expected), tolerance)

    def check_eager(self, op, layer_path, impl_id, device, dtype_name, case, tolerance, inplace):
        """The in-place eager variant on clones of the inputs: it matches the reference and
        modifies no input but the op's ``inplace`` arguments."""
        impl = self.impl(op, impl_id)
        self.require_available(impl)
        eager = getattr(impl.fn, "eager", None)
        assert eager is not None, f"{impl_id} {op} has no eager variant: run `make codegen`"
        reference = self.impl(op, self.reference)
        dtype = getattr(torch, dtype_name)
        layer = self.layer(layer_path, case["init"], dtype, device)
        inputs = self.inputs(case["inputs"], dtype, device)
        self.require_served(impl, layer, inputs)
        expected = self.call(reference, layer, inputs)
        for _ in range(2):  # the second call runs on what the first one cached
            args = {name: _clone(value) for name, value in inputs.items()}
            actual = eager(layer, **args) if layer is not None else eager(**args)
            self.compare(actual, expected, tolerance)
            for name, value in args.items():
                if isinstance(value, torch.Tensor) and name not in inplace:
                    assert torch.equal(value, inputs[name]), (
                        f"{impl_id} eager variant mutated input {name!r}, which is not in-place "
                        f"(inplace: {inplace})"
                    )

    def check_reference(
        self, op, layer_path, dtype_name, case, returns, reads=(), mutates=(), weight_dtype=None
    ):
        """The reference alone. It runs on the case with a stand-in for the layer that holds only
        the attributes ops.yaml says it reads (``reads``: reading any other is an AttributeError),
        its ``weight`` in ``weight_dtype`` if given (vLLM keeps some weights in float32 under
        half-precision activations). It is functional: it changes no input but ``mutates``
        (``call`` checks that) and no attribute it reads, and returns neither an input nor an
        attribute, nor a view of one. It returns one of the declared ``returns`` forms and only
        finite floating-point values."""
        reference = self.impl(op, self.reference)
        who = f"{self.reference} {op}"  # what the messages name
        dtype = getattr(torch, dtype_name)
        layer = self.layer(layer_path, case["init"], dtype, "cpu")
        if layer is not None:
            layer = SimpleNamespace(**{name: getattr(layer, name) for name in reads})
            if weight_dtype is not None:
                for name, value in _affine(layer, weight_dtype).items():
                    setattr(layer, name, value.detach())
        read = dict(vars(layer)) if layer is not None else {}
        read_tensors = {k: v.clone() for k, v in read.items() if isinstance(v, torch.Tensor)}
        inputs = self.inputs(case["inputs"], dtype, "cpu")
        result, args = self._run(reference, layer, inputs, mutates)
        for name, before in read_tensors.items():
            assert torch.equal(read[name], before), f"{who} modified layer.{name}"
        for name, value in read.items():
            assert getattr(layer, name) is value, f"{who} rebound layer.{name}"
        outputs = result if isinstance(result, tuple) else (result,)
        if not mutates:  # with mutates, ``call`` checked the None return
            assert any(
                _has_form(result, form) for form in returns
            ), f"{who} returned {_describe(result)}, declared {' | '.join(returns)}"
            given = [v for v in args.values() if isinstance(v, torch.Tensor)]
            given += [read[name] for name in read_tensors]
            storages = {t.untyped_storage().data_ptr() for t in given}
            for index, out in enumerate(outputs):
                if isinstance(out, torch.Tensor):
                    assert all(out is not t for t in given), f"{who} returned an input"
                    assert (
                        out.untyped_storage().data_ptr() not in storages
                    ), f"{who}: output {index} shares memory with an input"
        for index, out in enumerate(outputs):
            if isinstance(out, torch.Tensor) and out.is_floating_point():
                finite = torch.isfinite(out.float()).all()
                assert finite, f"{who}: output {index} is not finite"

    def check_native(self, op, layer_path, dtype_name, case, weight_dtype=None):
        """The reference equals vLLM's ``forward_native`` of the same layer exactly (vLLM's runs on
        clones: its fused add + RMSNorm may work in place), also with a ``weight`` in
        ``weight_dtype``."""
        reference = self.impl(op, self.reference)
        dtype = getattr(torch, dtype_name)
        layer = self.layer(layer_path, case["init"], dtype, "cpu")
        if weight_dtype is not None:
            for name, value in _affine(layer, weight_dtype).items():
                setattr(layer, name, torch.nn.Parameter(value, requires_grad=False))
        inputs = self.inputs(case["inputs"], dtype, "cpu")
        expected = layer.forward_native(**{k: _clone(v) for k, v in inputs.items()})
        actual = self.call(reference, layer, inputs)
        self.compare(actual, expected, EXACT)

    def check_residual(self, op, layer_path, dtype_name, case):
        """With a residual the reference returns ``(normalised, x + residual)``: the sum computed
        in float32 and rounded once, and the normalisation of that sum."""
        reference = self.impl(op, self.reference)
        dtype = getattr(torch, dtype_name)
        layer = self.layer(layer_path, case["init"], dtype, "cpu")
        inputs = self.inputs(case["inputs"], dtype, "cpu")
        result = self.call(reference, layer, inputs)
        assert isinstance(result, tuple) and len(result) == 2, _describe(result)
        normed, summed = result
        x, residual = inputs["x"], inputs["residual"]
        self.compare(summed, (x.float() + residual.float()).to(dtype), EXACT)
        alone = self.call(reference, layer, {**inputs, "x": summed, "residual": None})
        torch.testing.assert_close(normed.float(), alone.float(), atol=2e-2, rtol=2e-2)

"""The model of ops.yaml: frozen dataclasses, the only thing templates and emitters ever see.

The loader (``codegen.manifest``) builds it from YAML, checking everything; the emitters
(``codegen.dest``) read it and never touch raw YAML. Names that reach generated code are
validated identifiers; everything else that reaches code (docstrings, literals) goes through the
``pystr``/``pyrepr`` filters.
"""

from __future__ import annotations

from dataclasses import dataclass

from .signature import FunctionSchema, Type

#: ops.yaml backend kind -> (BackendImplKind member, impl_id prefix)
KINDS = {"flagos": "DEFAULT", "vendor": "VENDOR", "reference": "REFERENCE"}
#: dtype names tests may use -> torch attribute
DTYPES = ("float32", "float16", "bfloat16", "float64")
INT_DTYPES = ("int64", "int32", "int16", "int8", "uint8")
#: floating-point dtypes a test tensor may have but no dtype under test (normal values cast)
FLOAT8_DTYPES = ("float8_e4m3fn",)
DTYPE_PLACEHOLDER = "$dtype"
#: examples of torch device types: ``device:`` takes any (``Probe`` checks ``torch.<type>``)
DEVICES = ("cuda", "npu", "xpu", "musa", "mlu", "cpu")
#: names people write for a device that are no torch device type -> the one they mean
NOT_DEVICES = {"gpu": "cuda", "nvidia": "cuda", "ascend": "npu"}


def camel(name: str) -> str:
    """``gemma_rms_norm`` -> ``GemmaRmsNorm``."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part)


@dataclass(frozen=True)
class Backend:
    name: str
    kind: str  # flagos | vendor | reference
    vendor: str | None
    package: str
    priority: int
    requires: tuple[str, ...]
    device: str | None
    opaque: bool
    probe: str | None  # attribute of the backend package: an extra zero-arg availability check
    line: int

    @property
    def impl_id(self) -> str:
        """Contract 1: ``default.flagos``, ``reference.torch``, ``vendor.<vendor>``."""
        if self.kind == "flagos":
            return "default.flagos"
        if self.kind == "reference":
            return "reference.torch"
        return f"vendor.{self.vendor}"

    @property
    def kind_member(self) -> str:
        return KINDS[self.kind]

    @property
    def path(self) -> str:
        """The package directory relative to the repository root."""
        return self.package.replace(".", "/")

    @property
    def has_probe(self) -> bool:
        return bool(self.requires or self.device or self.probe)

    @property
    def token(self) -> str:
        return f"vendor:{self.vendor}" if self.kind == "vendor" else self.kind


@dataclass(frozen=True)
class Impl:
    backend: str
    module: str
    function: str
    priority: int | None  # None: the backend's default
    requires: tuple[str, ...]  # modules this impl needs beyond the backend's
    line: int
    #: the in-place variant used outside a torch.compile trace: (module, function), or None
    eager: tuple[str, str] | None = None
    #: (argument, the values the impl serves) pairs; a call with another value skips the impl
    supports: tuple[tuple[str, tuple[object, ...]], ...] = ()

    @property
    def ref(self) -> str:
        return f"{self.module}.{self.function}"

    @property
    def eager_ref(self) -> str | None:
        return None if self.eager is None else f"{self.eager[0]}.{self.eager[1]}"


@dataclass(frozen=True)
class Layer:
    module: str  # vllm.model_executor.layers.layernorm
    cls: str  # RMSNorm
    #: a supported vLLM release lacks the class or has it as no CustomOp (``layer_optional``):
    #: its generated class is defined only where vLLM's module has it
    optional: bool = False

    @property
    def path(self) -> str:
        return f"{self.module}.{self.cls}"

    @property
    def short_module(self) -> str:
        """The module of ``vllm_fl/ops/`` the OOT class lives in (the vLLM module's last part)."""
        return self.module.rsplit(".", 1)[-1]

    @property
    def oot_cls(self) -> str:
        return self.cls + "FL"


@dataclass(frozen=True)
class Subclass(Layer):
    """A vLLM subclass of an op's layer that computes what the layer computes (``subclasses:``):
    it differs in how it is built (a RoPE scaling's ``cos_sin_cache``), not in its ``forward_*``
    methods, so it gets a generated class of its own that dispatches the same op. vLLM replaces
    classes by exact name, which is why the layer's class alone does not reach it."""

    line: int = 0


@dataclass(frozen=True)
class Function:
    """A function vLLM calls (``vllm._custom_ops.topk_softmax``) that an op replaces."""

    module: str  # vllm._custom_ops
    name: str  # topk_softmax

    @property
    def path(self) -> str:
        return f"{self.module}.{self.name}"


@dataclass(frozen=True)
class Attr:
    """A layer attribute an impl reads through ``self``."""

    name: str
    type: Type


@dataclass(frozen=True)
class TensorInput:
    shape: tuple[int, ...]
    dtype: str  # a DTYPES/INT_DTYPES name or "$dtype"
    high: int | None  # integer tensors: values in [0, high)
    scale: float | None = None  # floating-point tensors: standard deviation (default 1)
    #: the elements themselves (nested tuples of ``shape``) instead of random ones: inputs that
    #: must agree with each other, such as sequence lengths and their start offsets
    values: tuple | None = None

    @property
    def is_int(self) -> bool:
        return self.dtype in INT_DTYPES


@dataclass(frozen=True)
class LiteralInput:
    value: object  # None, bool, int, float or str


@dataclass(frozen=True)
class QuantScheme:
    """What the manifest needs to know of a scheme of ``vllm_fl.testing.quantize.SCHEMES``."""

    #: its group, one entry per dimension (a number: that size is required; None: any positive
    #: size), e.g. ``(1, None)`` for [1, g]; None: the scheme takes no group
    group: tuple[int | None, ...] | None
    zeros: bool  # whether it makes zero points (an asymmetric scheme)
    ranks: tuple[int, ...]  # the ranks of the tensors it quantises; () for any
    shapes: str  # how the ranks read in an error, e.g. "[M, K]"
    group_form: str = ""  # how the group reads in an error, e.g. "[1, g]"


#: the schemes a quantized test input may name: the keys of vllm_fl.testing.quantize.SCHEMES
#: (tests/testing/test_quantize.py checks both agree)
QUANT_SCHEMES = {
    "fp8_tensor": QuantScheme(None, False, (), "of any shape"),
    "fp8_token": QuantScheme(None, False, (2,), "[M, K]"),
    "fp8_group": QuantScheme((1, None), False, (2,), "[M, K]", "[1, g]"),
    "fp8_block": QuantScheme((None, None), False, (2, 3), "[N, K] or [E, N, K]", "[bn, bk]"),
    "int8_tensor": QuantScheme(None, False, (), "of any shape"),
    "int8_token": QuantScheme(None, False, (2,), "[M, K]"),
    "int8_channel": QuantScheme(None, False, (2,), "[N, K]"),
    "int8_token_asym": QuantScheme(None, True, (2,), "[M, K]"),
    "wna16_w4": QuantScheme((None,), False, (2,), "[K, N]", "[G]"),
    "wna16_w4_zp": QuantScheme((None,), True, (2,), "[K, N]", "[G]"),
    "wna16_w8": QuantScheme((None,), False, (2,), "[K, N]", "[G]"),
    "wna16_w8_zp": QuantScheme((None,), True, (2,), "[K, N]", "[G]"),
}


@dataclass(frozen=True)
class QuantizedInput:
    """A normal float32 tensor quantised with a scheme: the input gets the quantised values,
    the argument ``scales`` the scales and ``zeros`` (asymmetric schemes) the zero points."""

    shape: tuple[int, ...]
    scheme: str  # a key of QUANT_SCHEMES
    group: tuple[int, ...] | None
    scales: str  # the argument that gets the scales
    zeros: str | None  # the argument that gets the zero points
    transpose: bool  # pass the quantised tensor's ``.t()`` (a weight [N, K] as [K, N])
    scale: float | None = None  # standard deviation of the drawn values (default 1)

    @property
    def sets(self) -> tuple[str, ...]:
        """The arguments the input assigns besides itself."""
        return (self.scales,) + ((self.zeros,) if self.zeros is not None else ())


@dataclass(frozen=True)
class DerivedInput:
    """A tensor computed from the case's other arguments by a function of the reference
    backend's ``impl/`` package (an input that must agree with others, like a weight's column
    sums)."""

    module: str
    function: str


@dataclass(frozen=True)
class TensorListInput:
    """A ``Tensor[]`` argument: one tensor input per element (collectives only)."""

    items: tuple[TensorInput, ...]


#: the ranks the generated collectives' tests run on: a per-rank input gives one input for each
COLLECTIVE_WORLD_SIZE = 2


@dataclass(frozen=True)
class PerRankInput:
    """An input of a collective's test case that differs between the ranks (``{per_rank:
    [...]}``): rank r draws ``ranks[r]``, one per rank of ``COLLECTIVE_WORLD_SIZE``. vLLM's
    uneven collectives need it: rank r contributes ``sizes[r]`` rows."""

    ranks: tuple["TensorInput | LiteralInput | TensorListInput", ...]


Input = TensorInput | LiteralInput | QuantizedInput | DerivedInput | TensorListInput | PerRankInput


def tensor_inputs(spec: Input) -> tuple[TensorInput, ...]:
    """The tensor inputs an input draws: itself, a list's elements, every rank's."""
    if isinstance(spec, TensorInput):
        return (spec,)
    if isinstance(spec, TensorListInput):
        return spec.items
    if isinstance(spec, PerRankInput):
        return tuple(t for item in spec.ranks for t in tensor_inputs(item))
    return ()


@dataclass(frozen=True)
class Case:
    init: tuple[tuple[str, object], ...]  # constructor keyword -> literal ("$dtype" allowed)
    inputs: tuple[tuple[str, Input], ...]  # in signature order
    line: int

    @property
    def quantized(self) -> bool:
        return any(isinstance(spec, QuantizedInput) for _, spec in self.inputs)


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float


@dataclass(frozen=True)
class RoundTrip:
    """``tests.round_trip``: the full-precision result a quantized op approximates."""

    function: tuple[str, str]  # (module, function) under the reference backend's impl/ package
    tolerances: tuple[tuple[str, Tolerance], ...]  # one per dtype of the op's tests
    line: int


@dataclass(frozen=True)
class Tests:
    dtypes: tuple[str, ...]
    cases: tuple[Case, ...]
    tolerances: tuple[tuple[str, Tolerance], ...]  # resolved for every dtype in ``dtypes``
    line: int
    #: (module, function) under the reference impl/ package mapping an op's arguments after the
    #: call to what is compared (results whose order or padding the op leaves open)
    canonical: tuple[str, str] | None = None
    round_trip: RoundTrip | None = None

    @property
    def reference_functions(self) -> tuple[tuple[str, str], ...]:
        """The (module, function) pairs of the reference impl/ package the tests call."""
        found = [self.canonical] if self.canonical else []
        if self.round_trip is not None:
            found.append(self.round_trip.function)
        for case in self.cases:
            for _, spec in case.inputs:
                if isinstance(spec, DerivedInput):
                    found.append((spec.module, spec.function))
        return tuple(dict.fromkeys(found))


@dataclass(frozen=True)
class Cache:
    """An op's paged KV-cache arguments ([num_blocks, block_size, ...]) and, for an op that
    writes into them, the argument holding each token's slot (block * block_size + offset)."""

    tensors: tuple[str, ...]
    slots: str | None
    line: int


@dataclass(frozen=True)
class Op:
    name: str
    schema: FunctionSchema
    doc: str
    layer: Layer | None
    reads: tuple[Attr, ...]
    impls: tuple[Impl, ...]  # manifest order
    tests: Tests | None
    line: int
    #: arguments vLLM's own kernels overwrite and return; an impl's ``eager`` variant may too
    inplace: tuple[str, ...] = ()
    #: the vLLM function the op replaces (ops without a layer), or None
    function: Function | None = None
    #: caller-provided output tensors every impl writes into (ops returning None)
    mutates: tuple[str, ...] = ()
    #: the vendor package manifest that declares the op itself (its ``ops:``), with its own
    #: reference impl; None for an op of the plugin's ops.yaml (``FLBackendBase`` declares it)
    declared_in: str | None = None
    #: the paged KV-cache arguments, or None
    cache: Cache | None = None
    #: int arguments that only bound lengths the tensors give (a larger value, the same result)
    bounds: tuple[str, ...] = ()
    #: the method of vLLM's device communicator the op replaces (a collective), or None
    collective: str | None = None
    #: vLLM subclasses of ``layer`` that compute what it computes (manifest order)
    subclasses: tuple[Subclass, ...] = ()

    @property
    def classes(self) -> tuple[Layer, ...]:
        """Every vLLM class the op replaces: its layer, then the layer's subclasses."""
        return () if self.layer is None else (self.layer, *self.subclasses)

    @property
    def camel(self) -> str:
        return camel(self.name)

    def impl(self, backend: str) -> Impl | None:
        for impl in self.impls:
            if impl.backend == backend:
                return impl
        return None

    @property
    def has_self(self) -> bool:
        """Whether impls take a caller first (``self``): the vLLM layer, or the communicator of
        a collective."""
        return self.layer is not None or self.collective is not None

    @property
    def opaque_ok(self) -> bool:
        """Whether opaque backends wrap this op as a torch.library custom op (tensor returns).

        Ops that write into ``mutates`` arguments are registered unwrapped: vLLM calls them
        inside its own opaque custom ops (``vllm.moe_forward``), never under a Dynamo trace;
        so are collectives, which vLLM calls inside its ``vllm.all_reduce``-style custom ops."""
        return self.schema.returns.all_tensors and not self.mutates and self.collective is None


@dataclass(frozen=True)
class Manifest:
    file: str  # how errors name the manifest, e.g. "ops.yaml"
    backends: tuple[Backend, ...]
    tolerances: tuple[tuple[str, Tolerance], ...]
    ops: tuple[Op, ...]

    def backend(self, name: str) -> Backend:
        for backend in self.backends:
            if backend.name == name:
                return backend
        raise KeyError(name)

    @property
    def reference(self) -> Backend | None:
        for backend in self.backends:
            if backend.kind == "reference":
                return backend
        return None

    def reference_impl(self, op: Op) -> Impl | None:
        """The op's impl by a reference backend: the plugin's, or for an op a vendor package
        declares, the package's own."""
        backend = self.reference_of(op)
        return None if backend is None else op.impl(backend.name)

    def reference_of(self, op: Op) -> Backend | None:
        """The reference backend that implements ``op`` (None: no reference impl)."""
        for impl in op.impls:
            backend = self.backend(impl.backend)
            if backend.kind == "reference":
                return backend
        return None

    def backend_ops(self, name: str) -> tuple[tuple[Op, Impl], ...]:
        """The (op, impl) pairs a backend implements, in manifest op order."""
        pairs = []
        for op in self.ops:
            impl = op.impl(name)
            if impl is not None:
                pairs.append((op, impl))
        return tuple(pairs)

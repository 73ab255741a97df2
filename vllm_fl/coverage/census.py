"""The layers a built model instantiates, counted per vLLM class, and how the plugin reaches each.

A *layer* is a module that computes: vLLM's ``CustomOp`` and ``PluggableLayer`` subclasses
(linear, embedding, norm, activation, rotary, the logits processor, MoE experts, mamba mixers,
...), its attention layers, and any other leaf module (``torch.nn.Conv1d``, ...). Modules that
only wire layers together (a model's decoder layer, its MLP block, vLLM's MoE runner) are
walked through, not listed; the MoE runner's router, which is no module, is listed. The children
of a dispatched layer are not listed: the op replaces the whole layer (a rotary embedding's
``ApplyRotaryEmb`` is never called by the rotary op).

Each layer gets a `Reach`:

- ``replaced``: the plugin's class replaced vLLM's (``vllm_fl.ops.OOT_CLASSES`` and the
  hand-written integration classes), its ops dispatched;
- ``replaced`` too: a subclass ops.yaml lists under its layer's op (``subclasses``: the RoPE
  scalings ``Llama3RotaryEmbedding``, ``YaRNScalingRotaryEmbedding``, ..., ``TPAwareRMSNorm``),
  which has a generated class of its own;
- ``subclass``: any other subclass of a class the plugin replaces, which vLLM builds as it is
  (vLLM swaps classes by exact name) and so runs vLLM's code (``FourierRotaryEmbedding``, whose
  ``forward_native`` is its own);
- ``disabled``: the plugin's class, but vLLM bound another method than its dispatch
  (``compilation_config.custom_ops`` disabled the op), or the policy kept vLLM's class although
  the manifest has an op for it;
- ``attention``, ``router``, ``kernel``: reached through the attention backend the platform
  chose, through the vLLM functions the plugin routes (the router's top-k), through the plugin's
  kernel class in a quantized layer's method (vLLM's kernel tables, `vllm_fl.quant`);
- ``gemm``: an unquantized linear layer or LM head whose method computes with the GEMM the
  plugin gave vLLM's dispatcher (`vllm_fl.linear`: the op ``linear``);
- ``vllm``: nothing of the plugin.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

from .vllm_code import VllmCode, classify

REPLACED, SUBCLASS, DISABLED, ATTENTION, ROUTER, KERNEL, GEMM, VLLM = (
    "replaced",
    "subclass",
    "disabled",
    "attention",
    "router",
    "kernel",
    "gemm",
    "vllm",
)
#: the reaches through which the built model's layer runs on the dispatch
DISPATCHED = (REPLACED, ATTENTION, ROUTER, KERNEL, GEMM)

#: the ops behind the plugin's attention backends (their impls call these through the dispatch;
#: ``attention_backend`` is the op that chose the backend)
BACKEND_OPS: dict[str, tuple[str, ...]] = {
    "vllm_fl.attention.backend.AttentionBackendFL": (
        "attention_backend",
        "reshape_and_cache_flash",
        "paged_attention",
    ),
    "vllm_fl.attention.mla.backend.MLABackendFL": (
        "attention_backend",
        "concat_and_cache_mla",
        "mla_prefill_attention",
        "mla_decode_attention",
        "gather_and_maybe_dequant_cache",
        "merge_attn_states",
    ),
}

#: the ops behind the plugin's attention backend for encoder-only layers, which have no KV cache
ENCODER_ONLY_BACKEND_OPS: dict[str, tuple[str, ...]] = {
    "vllm_fl.attention.backend.AttentionBackendFL": ("attention_backend", "varlen_attention"),
}
#: vLLM's name of the encoder-only attention type (``AttentionType.ENCODER_ONLY``'s value)
ENCODER_ONLY = "encoder_only"


def backend_ops(backend: type, attn_type: object) -> tuple[str, ...]:
    """The dispatched ops a layer of ``attn_type`` runs through ``backend``; empty where it is
    none of the plugin's. vLLM wraps the backend of an encoder-only layer in a subclass of its
    own (``EncoderOnlyAttention_<name>``): the first class of the MRO the table knows counts."""
    encoder_only = getattr(attn_type, "value", attn_type) == ENCODER_ONLY
    table = ENCODER_ONLY_BACKEND_OPS if encoder_only else BACKEND_OPS
    return next((table[_qualname(c)] for c in backend.__mro__ if _qualname(c) in table), ())


#: the ops of the plugin's hand-written integration classes
INTEGRATION_OPS: dict[str, tuple[str, ...]] = {
    "UnquantizedFusedMoEMethod": ("fused_experts",),
}

#: vLLM's MoE routers whose top-k is a vLLM function the plugin routes through the dispatch
#: (``GroupedTopKRouter``: ``vllm_fl.grouped_routing``, where vLLM would use its fused kernel)
ROUTER_OPS: dict[str, tuple[str, ...]] = {
    "FusedTopKRouter": ("topk_softmax",),
    "FusedTopKBiasRouter": ("topk_softmax",),
    "GroupedTopKRouter": ("grouped_topk",),
}


def _grouped_dispatchable(router: Any) -> bool:
    """Whether a grouped router's calls reach the op (``vllm_fl.grouped_routing``): those vLLM
    would give its fused kernel; the others (DeepSeek-V2's routing without a correction bias)
    run vLLM's Python routing."""
    from vllm_fl.grouped_routing import dispatchable

    return dispatchable(
        getattr(router, "num_expert_group", None),
        getattr(router, "top_k", 0),
        getattr(router, "scoring_func", ""),
        getattr(router, "e_score_correction_bias", None),
    )


#: modules that compute nothing
_INERT = ("Identity", "Dropout", "ModuleList", "ModuleDict", "Sequential")


@dataclass
class Layer:
    """One vLLM class of the model: how many instances, where the first is, how the plugin
    reaches it (``reach``, one of the module's constants), the in-tree class the plugin replaces
    for it (``in_tree``), the ops that compute it when dispatched, and what vLLM's own code for it
    calls here (``vllm_code``)."""

    name: str
    qualname: str
    reach: str
    count: int = 0
    example: str = ""
    in_tree: str = ""
    ops: tuple[str, ...] = ()
    vllm_code: VllmCode = field(default_factory=lambda: VllmCode("-"))
    note: str = ""

    @property
    def dispatched(self) -> bool:
        """Whether the built model reaches this layer through the dispatch (its ``ops``)."""
        return self.reach in DISPATCHED


def _our_classes() -> dict[type, str]:
    """The plugin's replacement class -> the in-tree name it replaces."""
    from vllm_fl.ops import OOT_CLASSES, OOT_SUBCLASSES
    from vllm_fl.registration import INTEGRATION_CLASSES

    out: dict[type, str] = {}
    subclasses = {in_tree: target for in_tree, (_, target) in OOT_SUBCLASSES.items()}
    for in_tree, target in {**OOT_CLASSES, **INTEGRATION_CLASSES, **subclasses}.items():
        module, _, name = target.partition(":")
        # a class of a vLLM version other than the installed one is not defined here
        # (a `layer_optional` layer, a listed subclass)
        try:
            out[getattr(importlib.import_module(module), name)] = in_tree
        except (ImportError, AttributeError):
            continue
    return out


def _ops_of(in_tree: str) -> tuple[str, ...]:
    from vllm_fl.ops import OOT_OPS

    op = OOT_OPS.get(in_tree)
    return (op,) if op else INTEGRATION_OPS.get(in_tree, ())


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _vllm_base(cls: type) -> type:
    """The first class of ``cls``'s MRO that is vLLM's (``cls`` itself for vLLM's classes)."""
    return next(
        (c for c in cls.__mro__ if c.__module__.startswith("vllm.")),
        cls,
    )


class _Walker:
    def __init__(self, with_code: bool) -> None:
        from vllm.model_executor.custom_op import CustomOp, PluggableLayer
        from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase

        self.layer_types = (CustomOp, PluggableLayer)
        self.attention_types = (AttentionLayerBase,)
        self.ours = _our_classes()
        self.by_name = {in_tree: cls for cls, in_tree in self.ours.items()}
        self.in_tree_names = set(self.by_name)
        self.rows: dict[tuple[str, str], Layer] = {}
        self.seen: set[int] = set()  # a module two parents hold (a MoE gate) counts once
        self.with_code = with_code

    def code(self, roots: list[tuple[Any, Any]]) -> VllmCode:
        return classify(roots) if self.with_code else VllmCode("-")

    # -- recording ---------------------------------------------------------------------------

    def _add(self, key: str, path: str, make) -> Layer:
        row = self.rows.get((key, ""))
        if row is None:
            row = self.rows[(key, "")] = make()
            row.example = path
        row.count += 1
        return row

    # -- the walk ----------------------------------------------------------------------------

    def walk(self, module: Any, prefix: str = "") -> None:
        for name, child in module.named_children():
            if id(child) in self.seen:
                continue
            self.seen.add(id(child))
            path = f"{prefix}.{name}" if prefix else name
            if self.visit(child, path):
                self.walk(child, path)
            router = getattr(child, "router", None)
            if router is not None and not hasattr(router, "named_children"):
                self.router(router, f"{path}.router")

    def visit(self, module: Any, path: str) -> bool:
        """Record ``module`` if it is a layer; whether to walk its children."""
        cls = type(module)
        if isinstance(module, self.attention_types):
            self.attention(module, path)
            return False
        quant_method = getattr(module, "quant_method", None)
        if type(quant_method) in self.ours:  # MoE experts computed by the plugin's method
            self.replaced(module, path, quant_method)
            return False
        if cls in self.ours:
            return self.replaced(module, path, module)
        if quant_method is not None and (
            self.kernel(module, path, quant_method) or self.gemm(module, path)
        ):
            return False
        is_layer = isinstance(module, self.layer_types)
        has_state = bool(module._parameters) or bool(module._buffers)
        children = list(module.children())
        if cls.__name__ in _INERT:
            return True
        if is_layer and (has_state or not children or self._replaceable(cls)):
            self.left(module, path)
            return True
        if (
            not is_layer
            and not children
            and not _vllm_base(cls).__module__.startswith("vllm.model_executor.models")
        ):
            self.left(module, path)
        return True

    def _replaceable(self, cls: type) -> str:
        """The in-tree class name the plugin replaces that ``cls`` is or derives from."""
        return next((c.__name__ for c in cls.__mro__ if c.__name__ in self.in_tree_names), "")

    def replaced(self, module: Any, path: str, computing: Any) -> bool:
        in_tree = self.ours[type(computing)]
        base = next(c for c in type(computing).__mro__[1:] if c.__name__ == in_tree)
        forward = getattr(computing, "_forward_method", None)
        bound = getattr(forward, "__func__", forward)
        dispatched = bound is getattr(type(computing), "forward_oot", None)
        shown = type(module) if module is not computing else base

        def make() -> Layer:
            row = Layer(
                name=shown.__name__,
                qualname=_qualname(shown),
                reach=REPLACED if dispatched else DISABLED,
                in_tree=in_tree,
                ops=_ops_of(in_tree),
            )
            if module is not computing:
                row.note = f"computed by {type(computing).__name__}"
            if not dispatched:
                native = getattr(base, "forward_native", None)
                row.vllm_code = self.code([(native, computing)])
                row.note = (
                    f"the manifest has {', '.join(row.ops)} but vLLM bound "
                    f"{getattr(forward, '__qualname__', forward)} (compilation_config.custom_ops)"
                )
            return row

        self._add(_qualname(shown), path, make)
        return False

    def left(self, module: Any, path: str) -> None:
        cls = type(module)
        in_tree = self._replaceable(cls)

        def make() -> Layer:
            reach = VLLM
            note = ""
            if in_tree and cls.__name__ != in_tree:
                reach = SUBCLASS
                note = f"subclass of {in_tree}, which the plugin replaces; vLLM builds it as it is"
            elif in_tree:
                reach = DISABLED
                note = "the manifest has an op for it, but the policy kept vLLM's class"
            return Layer(
                name=cls.__name__,
                qualname=_qualname(cls),
                reach=reach,
                in_tree=in_tree,
                ops=_ops_of(in_tree) if in_tree else (),
                vllm_code=self.code(_roots(module)),
                note=note,
            )

        self._add(_qualname(cls), path, make)

    def attention(self, module: Any, path: str) -> None:
        backend = getattr(module, "attn_backend", None)
        cls = type(module)
        backend_name = _qualname(backend) if isinstance(backend, type) else ""

        def make() -> Layer:
            ops = backend_ops(backend, getattr(module, "attn_type", None)) if backend_name else ()
            row = Layer(
                name=cls.__name__,
                qualname=_qualname(cls),
                reach=ATTENTION if ops else VLLM,
                ops=ops,
                note=f"backend {backend.__name__}" if isinstance(backend, type) else "",
            )
            if not ops:
                impl = getattr(module, "impl", None)
                roots = [(getattr(impl, "forward", None), impl)] if impl is not None else []
                row.vllm_code = self.code(roots + _roots(module))
            return row

        self._add(f"{_qualname(cls)}|{backend_name}", path, make)

    def kernel(self, module: Any, path: str, quant_method: Any) -> bool:
        """Record a layer whose quant method computes through one of the plugin's kernel classes
        (vLLM keeps the kernel it chose on the method, a MoE method's modular kernel a few
        objects further: `_held_objects`); whether it did."""
        parts = _held_objects(quant_method)
        plugin = [p for p in parts if type(p).__module__.startswith("vllm_fl.")]
        if not plugin:
            return False
        ops = tuple(op for part in plugin for op in bound_ops(type(part).__module__))
        if not ops:
            return False
        cls = type(module)
        names = ", ".join(type(p).__name__ for p in plugin)
        key = f"{_qualname(cls)}|{names}"
        self._add(
            key,
            path,
            lambda: Layer(
                name=cls.__name__,
                qualname=_qualname(cls),
                reach=KERNEL,
                ops=tuple(dict.fromkeys(ops)),
                note=f"computed by {names}",
            ),
        )
        return True

    def gemm(self, module: Any, path: str) -> bool:
        """Record an unquantized linear layer or LM head whose GEMM is the op's
        (`vllm_fl.linear.gemm_ops`); whether it is."""
        from vllm_fl.linear import gemm_ops

        ops = gemm_ops(module)
        if not ops:
            return False
        cls = type(module)
        method = type(module.quant_method).__name__
        self._add(
            f"{_qualname(cls)}|{method}",
            path,
            lambda: Layer(
                name=cls.__name__,
                qualname=_qualname(cls),
                reach=GEMM,
                ops=ops,
                note=f"{method}'s GEMM (vllm_fl.linear)",
            ),
        )
        return True

    def router(self, router: Any, path: str) -> None:
        cls = type(router)

        def make() -> Layer:
            ops = ROUTER_OPS.get(cls.__name__, ())
            note = "the MoE router (no module)"
            if ops == ("grouped_topk",) and not _grouped_dispatchable(router):
                ops, note = (), f"{note}; vLLM's Python grouped top-k (no fused-kernel call)"
            return Layer(
                name=cls.__name__,
                qualname=_qualname(cls),
                reach=ROUTER if ops else VLLM,
                ops=ops,
                vllm_code=self.code([(getattr(router, "select_experts", None), router)]),
                note=note,
            )

        self._add(_qualname(cls), path, make)


def _held_objects(root: Any, depth: int = 3) -> list[Any]:
    """``root`` and the objects its attributes hold, followed through vLLM's own objects up to
    ``depth`` attributes deep (a MoE method -> its modular kernel -> the kernel's implementation
    -> the experts), each once."""
    found: list[Any] = [root]
    seen = {id(root)}
    frontier = [root]
    for _ in range(depth):
        following = []
        for obj in frontier:
            for value in getattr(obj, "__dict__", {}).values():
                if id(value) in seen or isinstance(value, (str, bytes, int, float, bool)):
                    continue
                seen.add(id(value))
                found.append(value)
                if type(value).__module__.startswith("vllm.") and hasattr(value, "__dict__"):
                    following.append(value)
        frontier = following
    return found


def bound_ops(module_name: str) -> list[str]:
    """The ops whose dispatch is bound as an attribute of module ``module_name``
    (``functions.bind``: how the plugin's kernel and backend classes call ops)."""
    import sys

    from vllm_fl.dispatch import get_default_manager

    module = sys.modules.get(module_name)
    if module is None:
        return []
    manager = get_default_manager()
    values = {id(v) for v in vars(module).values()}
    return [op for op in manager.registry.list_operators() if id(manager.binding(op).fn) in values]


def _roots(module: Any) -> list[tuple[Any, Any]]:
    """The methods ``module`` runs here: the one vLLM bound (``CustomOp``) or ``forward``, and
    its quant method's ``apply`` / ``embedding``."""
    roots: list[tuple[Any, Any]] = [
        (getattr(module, "_forward_method", None) or getattr(module, "forward", None), module)
    ]
    quant_method = getattr(module, "quant_method", None)
    if quant_method is not None:
        for name in ("apply", "embedding"):
            method = getattr(quant_method, name, None)
            if method is not None:
                roots.append((method, quant_method))
    return roots


def census(model: Any, with_code: bool = True) -> list[Layer]:
    """Every layer class of ``model``, in the order of first appearance; ``with_code``: classify
    vLLM's own code of the layers left to it (reads their source, `vllm_code.classify`)."""
    walker = _Walker(with_code)
    walker.walk(model)
    return list(walker.rows.values())

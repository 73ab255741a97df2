"""Registers the generated out-of-tree layer classes over vLLM's in-tree ones.

`prepare_model_process()` is what a process that is about to build the model runs: the workers of
the plugin's platforms call it from `init_device` (see `vllm_fl.worker`), after every general
plugin of the process has loaded and the device is set, before `load_model`. It registers every
class (`register_oot_classes`) and resolves every op through the dispatch manager, so that
selection (and its `Op '<op>' using '<impl_id>'` log) happens before torch.compile traces a model.
A process that only builds the configuration or serves requests (vLLM's front-end) never gets
here: it imports neither the generated classes nor any kernel library, and keeps CUDA untouched.

`register_oot_classes()`, for each entry of `vllm_fl.ops.OOT_CLASSES` the OOT policy allows,
checks the class (a subclass of the in-tree class, with `forward_oot` and no `__init__` of its
own), gives it a `dispatch_forward` that keeps vLLM's `_forward_method` following the dispatch
(`_follow_forward_method`), and registers it with
`CustomOp.register_oot(_decorated_op_cls=cls, name=<in-tree name>)`,
unless another plugin registered a class under that name: that one is kept and named once at
INFO. A plugin that registers after us takes the layer over the same way instead of failing
vLLM's duplicate-name assert (`compat.guard_oot_registry`). The registered class keeps the
in-tree op name (`rms_norm`), so `compilation_config.custom_ops` means for it what it means for
vLLM's class.

vLLM replaces classes by exact name, so a subclass of a replaced layer (Llama-3.1's
`Llama3RotaryEmbedding`, vLLM's YaRN, linear and NTK scalings, the Transformers backend's
`TPAwareRMSNorm`) would keep vLLM's code. ops.yaml lists under an op's `subclasses` those whose
computation is the layer's, and each has a generated class of its own (`vllm_fl.ops.OOT_SUBCLASSES`),
registered under the subclass's name like the layer's. Before one is registered it is checked
against the installed vLLM: a subclass this vLLM lacks is left out (named once in the start-up
summary), and one whose classes between it and the layer define a `forward_*` method (vLLM gave
it a computation of its own) keeps vLLM's class, with a WARNING naming the method. A layer is
left out the same way where this vLLM lacks it or has it as no CustomOp (ops.yaml's
`layer_optional`: `GELUTanh` is not in vLLM 0.24, whose `LayerNorm` is a plain `nn.Module`).

Which classes are replaced is the dispatch policy's decision (`current_policy()`): the switch
`VLLM_FL_PREFER_ENABLED`, `VLLM_FL_OOT_ENABLED`, and `VLLM_FL_OOT_WHITELIST` /
`VLLM_FL_OOT_BLACKLIST` / the config file's `oot_blacklist`. An entry matches the in-tree class
name (`RMSNorm`), vLLM's registered op name (`rms_norm`) or the op of ops.yaml the replacement
dispatches (which `explain` shows; for vLLM's `ReLUSquaredActivation`, registered as `relu2`, it
may be `relu_squared`), case-insensitively; a subclass's entry also matches the names of the
layer it subclasses (blacklisting `RotaryEmbedding` keeps vLLM's RoPE scalings too).
"""

from __future__ import annotations

import importlib
import logging
import threading

from vllm_fl import compat

LOGGER_NAME = "vllm_fl.vllm"
logger = logging.getLogger(LOGGER_NAME)

_lock = threading.Lock()
_replaced: dict[str, str] = {}  # in-tree name -> "module:Class" registered by us
_yielded: set[str] = set()  # in-tree names another plugin took over after we registered
_foreign_logged: set[str] = set()
_logged = False
#: listed subclasses left out: in-tree name -> why (absent from this vLLM / own forward_*)
_absent: dict[str, str] = {}
_diverged: dict[str, str] = {}


def current_policy():
    """The dispatch's selection policy in force (`vllm_fl.dispatch.get_policy()`): its
    `enabled`, `oot_enabled`, `oot_whitelist` / `oot_blacklist` come from VLLM_FL_PREFER_ENABLED,
    VLLM_FL_OOT_ENABLED, VLLM_FL_OOT_WHITELIST / VLLM_FL_OOT_BLACKLIST, the config file's
    oot_blacklist and the platform YAML, with the precedence of the configuration reference."""
    from vllm_fl.dispatch import get_policy

    return get_policy()


def configure_logging(level: int | None = None) -> None:
    """Give the integration's logger `level`, by default the dispatch's (VLLM_FL_LOG_LEVEL), and,
    when nothing else handles its records, a stderr handler (as the dispatch logger has)."""
    from vllm_fl.dispatch import configure_logger, get_config

    if level is None:
        level = get_config().log_level
    configure_logger(logger, level)


def _describe(policy) -> str:
    sources = getattr(policy, "sources", {}) or {}
    if not policy.oot_active:
        key = "enabled" if not policy.enabled else "oot_enabled"
        return sources.get(key, key)
    key = "oot_whitelist" if policy.oot_whitelist is not None else "oot_blacklist"
    return sources.get(key, key)


def _load_class(target: str) -> type:
    module_name, _, qualname = target.partition(":")
    obj = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _in_tree_base(cls: type, in_tree_name: str) -> type:
    """The in-tree class `cls` replaces, checked: `cls` subclasses it, overrides forward_oot and
    keeps its constructor (CustomOp.__new__ builds ours with the in-tree arguments)."""
    base = next((c for c in cls.__mro__[1:] if c.__name__ == in_tree_name), None)
    if base is None or not issubclass(cls, compat.custom_op_base()):
        raise TypeError(
            f"{cls.__module__}.{cls.__qualname__} cannot replace vLLM's {in_tree_name}: "
            f"it must subclass {in_tree_name} (its bases: {[c.__name__ for c in cls.__mro__]})"
        )
    if "forward_oot" not in vars(cls):
        raise TypeError(f"{cls.__qualname__} must define forward_oot (it replaces {in_tree_name})")
    if "__init__" in vars(cls):
        raise TypeError(
            f"{cls.__qualname__} must not define __init__: vLLM constructs it with "
            f"{in_tree_name}'s arguments"
        )
    return base


def _follow_forward_method(cls: type) -> None:
    """vLLM's `CustomOp.__init__` binds `self.forward_oot` into `self._forward_method` (through
    `dispatch_forward`). While no fallback is possible the dispatch puts the selected impl itself
    on the class as `forward_oot`, so that bound method would keep calling that impl after a
    change of policy: `cls` gets a `dispatch_forward` that has the dispatch follow it
    (`follow_bound_method`). Idempotent; a class whose `forward_oot` is no dispatch site (the
    integration classes) is left alone."""
    if "dispatch_forward" in vars(cls) or "forward_oot" not in vars(cls):
        return
    from vllm_fl.dispatch import follow_bound_method

    def dispatch_forward(self, *args, **kwargs):
        method = super(cls, self).dispatch_forward(*args, **kwargs)
        if getattr(method, "__self__", None) is self and method.__func__ is type(self).forward_oot:
            follow_bound_method(self, "_forward_method", "forward_oot")
        return method

    dispatch_forward.__qualname__ = f"{cls.__qualname__}.dispatch_forward"
    cls.dispatch_forward = dispatch_forward


#: vLLM CustomOps replaced by hand-written integration classes: their out-of-tree path is more than
#: one op call (the MoE method routes, computes experts and leaves shared experts to vLLM).
INTEGRATION_CLASSES: dict[str, str] = {
    "UnquantizedFusedMoEMethod": "vllm_fl.moe:UnquantizedFusedMoEMethodFL",
}


def _subclasses() -> dict[str, tuple[str, str]]:
    """In-tree subclass name -> (in-tree name of the layer it subclasses, "module:Class")."""
    from vllm_fl.ops import OOT_SUBCLASSES

    return dict(OOT_SUBCLASSES)


def _oot_classes() -> dict[str, str]:
    from vllm_fl.ops import OOT_CLASSES

    subclasses = {name: target for name, (_, target) in _subclasses().items()}
    return {**OOT_CLASSES, **INTEGRATION_CLASSES, **subclasses}


def own_forward(vllm_cls: type, layer_name: str) -> str:
    """Why `vllm_cls` (a vLLM subclass of the layer called `layer_name`) may not compute what the
    layer computes: a `forward_*` method one of its classes before the layer defines, or that it
    does not subclass the layer at all; '' when it only inherits them."""
    mro = vllm_cls.__mro__
    layer = next((c for c in mro if c.__name__ == layer_name), None)
    if layer is None:
        return f"it does not subclass {layer_name}"
    own = [
        f"{c.__qualname__}.{name}"
        for c in mro[: mro.index(layer)]
        for name in vars(c)
        if name.startswith("forward_")
    ]
    return f"it defines {', '.join(own)}" if own else ""


def _load_replacement(in_tree_name: str, target: str, layer_name: str = "") -> type | None:
    """The generated class replacing `in_tree_name`, or None where it is left out: this vLLM
    lacks the class (its module, or the class: a layer ops.yaml marks `layer_optional`, whose
    generated class is then not defined), has it as no CustomOp (vLLM 0.24's `LayerNorm` is a
    plain `nn.Module`, which vLLM never swaps), or, for a listed subclass of the layer called
    `layer_name`, computes differently (`own_forward`)."""
    try:
        cls = _load_class(target)
    except (ImportError, AttributeError) as exc:
        _absent[in_tree_name] = f"{type(exc).__name__}: {exc}"
        return None
    in_tree = next((c for c in cls.__mro__[1:] if c.__name__ == in_tree_name), None)
    if in_tree is not None and not issubclass(in_tree, compat.custom_op_base()):
        _absent[in_tree_name] = f"{in_tree.__module__}.{in_tree_name} is no CustomOp"
        return None
    if not layer_name:
        return cls
    problem = own_forward(_in_tree_base(cls, in_tree_name), layer_name)
    if problem:
        if in_tree_name not in _diverged:
            logger.warning(
                "vllm_fl: vLLM's %s is listed in ops.yaml as a subclass of %s computing what it "
                "computes, but %s: vLLM's class is kept for it (drop it from the op's "
                "`subclasses`, or give it an op of its own)",
                in_tree_name,
                layer_name,
                problem,
            )
        _diverged[in_tree_name] = problem
        return None
    return cls


def _manifest_op(in_tree_name: str) -> str:
    """The op of ops.yaml the replacement of `in_tree_name` dispatches ('' for the hand-written
    integration classes, which the lists name by class)."""
    from vllm_fl.ops import OOT_OPS

    return OOT_OPS.get(in_tree_name, "")


def op_name_of(in_tree_cls: type) -> str:
    """vLLM's registered op name of an in-tree class ('rms_norm' for RMSNorm; inherited where
    vLLM registers a base class, as 'rotary_embedding' on RotaryEmbeddingBase)."""
    return getattr(in_tree_cls, "name", "") or ""


def allowed_classes(policy=None) -> dict[str, type]:
    """In-tree name -> the generated class the policy lets replace it (checked, not registered)."""
    policy = policy or current_policy()
    if not policy.oot_active:
        return {}
    allowed: dict[str, type] = {}
    subclasses = _subclasses()
    for in_tree_name, target in _oot_classes().items():
        layer_name = subclasses[in_tree_name][0] if in_tree_name in subclasses else ""
        cls = _load_replacement(in_tree_name, target, layer_name)
        if cls is None:
            continue
        base = _in_tree_base(cls, in_tree_name)
        names = (op_name_of(base), _manifest_op(in_tree_name), layer_name)
        if policy.oot_allowed(in_tree_name, *(name for name in names if name)):
            allowed[in_tree_name] = cls
    return allowed


def _foreign(registry: dict[str, type], in_tree_name: str, ours: type) -> type | None:
    existing = registry.get(in_tree_name)
    return existing if existing is not None and existing is not ours else None


def _log_foreign(in_tree_name: str, cls: type | None) -> None:
    if in_tree_name in _foreign_logged:
        return
    _foreign_logged.add(in_tree_name)
    by = f"{cls.__module__}.{cls.__qualname__}" if cls is not None else "another plugin"
    logger.info(
        "vllm_fl: %s is registered out of tree by another plugin (%s): that class is used "
        "for it, ours for the other layers",
        in_tree_name,
        by,
    )


def _before_foreign_registration(name: str, cls: type | None) -> None:
    """Another plugin registers `name` now: withdraw ours so that its class wins (vLLM would
    assert on the duplicate name)."""
    with _lock:
        if name not in _replaced:
            return
        registry = compat.oot_registry()
        ours = _load_class(_replaced.pop(name))
        if registry.get(name) is ours:
            compat.unregister_oot(name)
        _yielded.add(name)
    _log_foreign(name, cls)


def register_oot_classes(policy=None) -> dict[str, str]:
    """Register every allowed generated class over its in-tree class; idempotent.

    Returns in-tree name -> "module:Class" of every class of ours that is registered now
    (including those registered by an earlier call).
    """
    global _logged
    policy = policy or current_policy()
    configure_logging()
    compat.guard_oot_registry(_before_foreign_registration)
    targets = _oot_classes()
    allowed = allowed_classes(policy)
    with _lock:
        registry = compat.oot_registry()
        newly: list[str] = []
        left_out = set(_absent) | set(_diverged)
        excluded = [name for name in targets if name not in allowed and name not in left_out]
        absent = sorted(name for name in _absent if name in targets)
        foreign: list[tuple[str, type]] = []
        for in_tree_name, cls in allowed.items():
            other = _foreign(registry, in_tree_name, cls)
            if other is not None or in_tree_name in _yielded:
                _replaced.pop(in_tree_name, None)
                if other is not None:
                    foreign.append((in_tree_name, other))
                continue
            _follow_forward_method(cls)
            if registry.get(in_tree_name) is not cls:
                compat.register_oot(cls, in_tree_name)
                newly.append(f"{in_tree_name} -> {cls.__name__}")
            _replaced[in_tree_name] = targets[in_tree_name]
        first = not _logged
        _logged = True
    for in_tree_name, other in foreign:
        _log_foreign(in_tree_name, other)
    if first:
        if not policy.oot_active:
            logger.info("vllm_fl: OOT layer replacement disabled (%s)", _describe(policy))
        else:
            logger.info(
                "vllm_fl: replaced vLLM layers: %s%s%s",
                ", ".join(newly) or "none",
                (f"; kept vLLM's ({_describe(policy)}): {', '.join(excluded)}" if excluded else ""),
                (f"; not in this vLLM: {', '.join(absent)}" if absent else ""),
            )
            for name in absent:
                logger.debug("vllm_fl: %s left out: %s", name, _absent[name])
    return dict(_replaced)


def prepare_model_process(vllm_config=None) -> dict[str, str]:
    """The plugin's step in a process about to build the model (the plugin's workers call it
    from `init_device`): register the classes, enable their ops where the user left
    `custom_ops` at vLLM's default (`vllm_fl.platform.apply_custom_ops_default`), resolve every
    op, after routing the vLLM functions ops.yaml replaces through the dispatch
    (`vllm_fl.functions.install`) and vLLM's grouped MoE routing through the op `grouped_topk`
    (`vllm_fl.grouped_routing.install`), the Mamba2 mixer's kernels through their ops
    (`vllm_fl.mamba.install`), the gated-delta-net functions of Qwen3-Next's linear attention
    through theirs (`vllm_fl.gdn.install`) and vLLM's unquantized linear layers and LM head
    through the op `linear` (`vllm_fl.linear.install`), giving vLLM's quantized-linear kernel tables their
    out-of-tree rows (`vllm_fl.quant.install_linear_kernels`) and vLLM's quantized MoE oracles
    the plugin's experts (`vllm_fl.quant.install_moe_experts`). Returns `register_oot_classes()`."""
    from vllm_fl import functions, gdn, grouped_routing, linear, mamba, quant

    replaced = register_oot_classes()
    if replaced:
        functions.install()
        grouped_routing.install()
        mamba.install()
        gdn.install()
        linear.install()
    quant.install_linear_kernels()
    quant.install_moe_experts()
    if vllm_config is not None:
        quant.log_quantization(vllm_config)
        from vllm_fl.platform import apply_custom_ops_default

        op_names = [
            op_name_of(_in_tree_base(_load_class(target), name))
            for name, target in replaced.items()
        ]
        apply_custom_ops_default(vllm_config.compilation_config, op_names)
    resolve_ops()
    return replaced


def resolve_ops() -> None:
    """Resolve every op through the dispatch manager now, before any model is traced. Quietly:
    the worker logs the selections of the ops its model uses once the model is built
    (`vllm_fl.worker.log_model_ops`)."""
    from vllm_fl.dispatch import get_default_manager

    get_default_manager().resolve_all(log=False)


def _reset_for_tests() -> None:
    """Forget this process's registrations (tests only)."""
    global _logged
    with _lock:
        registry = compat.oot_registry()
        for name in list(_replaced):
            registry.pop(name, None)
        _replaced.clear()
        _yielded.clear()
        _foreign_logged.clear()
        _absent.clear()
        _diverged.clear()
        _logged = False

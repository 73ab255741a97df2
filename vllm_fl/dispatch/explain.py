"""Human-readable report of what dispatch would select, and why (``python -m vllm_fl.dispatch
explain``). Pure: it neither installs selections nor logs them."""

from __future__ import annotations

from .config.loader import DispatchConfig
from .config.selection import POLICY_FIELDS, SelectionPolicy
from .config.settings import PROCESS_SETTINGS
from .policy.current import get_config, get_policy
from .policy.name_checks import unknown_names
from .registry import BUILT_IN, DIRECT
from .runtime.default_manager import get_default_manager
from .runtime.manager import OpManager
from .stubs import stub_functions
from .types import OpImpl

__all__ = ["explain", "explain_table", "explain_ops"]


def _fmt(value) -> str:
    if isinstance(value, (set, frozenset)):
        return "[" + ", ".join(sorted(value)) + "]"
    if isinstance(value, dict) or hasattr(value, "items"):
        return "{" + "; ".join(f"{k}={'|'.join(v)}" for k, v in value.items()) + "}"
    return str(value)


def explain_ops(
    manager: OpManager | None = None, policy: SelectionPolicy | None = None
) -> list[dict]:
    """Per op: ``op``, ``order`` (tokens), ``restricted``, ``candidates`` (OpImpl list, best first),
    ``rejected`` ([(OpImpl, reason)]), ``selected`` (impl id or None), ``stubs`` (impl id ->
    the scaffolded stubs it would run, for candidates and rejected alike); and for calls traced
    by torch.compile ``traced_order``, ``traced_candidates``, ``selected_traced``."""
    manager = manager if manager is not None else get_default_manager()
    policy = policy if policy is not None else get_policy()
    out = []
    for op in manager.registry.list_operators():
        ordered, rejected = manager.evaluate(op, policy)
        tokens, restricted = policy.order_for(op)
        traced = manager.evaluate(op, policy, traced=True)[0] if policy.splits_traced else ordered
        impls = list(ordered) + [impl for impl, _ in rejected]
        stubs = {impl.impl_id: stub_functions(impl.fn) for impl in impls}
        out.append(
            {
                "op": op,
                "order": tokens,
                "restricted": restricted,
                "candidates": ordered,
                "rejected": rejected,
                "selected": ordered[0].impl_id if ordered else None,
                "stubs": {impl_id: fns for impl_id, fns in stubs.items() if fns},
                "traced_order": policy.order_for(op, traced=True)[0],
                "traced_candidates": traced,
                "selected_traced": traced[0].impl_id if traced else None,
            }
        )
    return out


def _served(impl: OpImpl) -> str:
    """``activation in [silu], w1_bias None``: the calls an impl with ``supports`` serves."""
    return ", ".join(
        f"{name} None" if values == (None,) else f"{name} in {list(values)}"
        for name, values in (impl.supports or {}).items()
    )


def _stub_note(impl: OpImpl, stubs: dict) -> str:
    """What explain says of an impl that is still (partly) the stub ``make codegen`` wrote."""
    names = ", ".join(f"{fn.__module__}.{fn.__qualname__}" for fn in stubs[impl.impl_id])
    return f"stub: {names} is still the stub `make codegen` scaffolded (it raises)"


def _settings(cfg: DispatchConfig, policy: SelectionPolicy) -> list[str]:
    """The policy's settings, then the process's (``settings.PROCESS_SETTINGS``), each with its
    value and source."""
    lines = ["Policy settings (value, source):"]
    for name in POLICY_FIELDS:
        src = policy.sources.get(name, "default")
        lines.append(f"  {name:<28} {_fmt(getattr(policy, name)):<36} {src}")
    lines.append("Process settings (value, source):")
    for setting in PROCESS_SETTINGS:
        value = getattr(cfg, setting.name)
        src = cfg.sources.get(setting.name, "-")
        if setting.reserved:
            src += " (reserved: validated, nothing in vllm_fl reads it)"
        shown = "None" if value is None else setting.show(value)
        lines.append(f"  {setting.name:<28} {shown:<36} {src}")
        if setting.name == "platform":
            where = (
                "platform YAML" if cfg.platform_file else "(none: VLLM_FL_CONFIG set or no file)"
            )
            lines.append(f"  {'platform_file':<28} {str(cfg.platform_file):<36} {where}")
    if cfg.overridden_env:
        lines.append(f"  ignored (VLLM_FL_CONFIG overrides): {', '.join(cfg.overridden_env)}")
    return lines


def _origin(manager: OpManager, impl: OpImpl) -> str:
    """`` (from <plugin>)`` for an impl a plugin registered; nothing for a built-in one or one
    registered directly."""
    origin = manager.registry.origin_of(impl)
    return "" if origin in (BUILT_IN, DIRECT) else f" (from {origin})"


def _plugins(manager: OpManager) -> dict[str, list[str]]:
    """plugin -> ``op:impl_id`` of every implementation it registered."""
    registry = manager.registry
    out: dict[str, list[str]] = {}
    for op in registry.list_operators():
        for impl in registry.get_implementations(op):
            origin = registry.origin_of(impl)
            if origin not in (BUILT_IN, DIRECT):
                out.setdefault(origin, []).append(f"{op}:{impl.impl_id}")
    return out


def explain(manager: OpManager | None = None) -> str:
    manager = manager if manager is not None else get_default_manager()
    cfg = get_config()
    policy = get_policy()
    lines = [f"vllm_fl dispatch: platform '{cfg.platform}' ({cfg.sources.get('platform')})", ""]
    lines += _settings(cfg, policy)
    if manager.load_errors:
        lines.append("Load errors:")
        lines += [f"  {name}: {msg}" for name, msg in manager.load_errors]
    plugins = _plugins(manager)
    if plugins:
        lines.append("Implementations from plugins:")
        lines += [f"  {origin}: {', '.join(names)}" for origin, names in plugins.items()]
    unknown = unknown_names(policy, manager.registry)
    if unknown:
        lines.append("Names no backend registered (typos?):")
        lines += [f"  {msg}" for msg in unknown]
    used = manager.used_impls()
    for info in explain_ops(manager, policy):
        op = info["op"]
        how = (
            f"op_backends ({policy.sources.get('per_op_order', 'default')}), restricts"
            if info["restricted"]
            else f"prefer={policy.prefer} ({policy.sources.get('prefer', 'default')})"
        )
        lines += ["", f"Op '{op}': order {' > '.join(info['order'])} from {how}"]
        stubs = info["stubs"]
        for rank, impl in enumerate(info["candidates"], 1):
            status = _stub_note(impl, stubs) if impl.impl_id in stubs else "available"
            lines.append(
                f"  {rank}. {impl.impl_id:<24} kind={impl.kind.value:<9} vendor={str(impl.vendor):<7}"
                f" priority={impl.priority:<4} {status}{_origin(manager, impl)}"
            )
            if impl.supports:
                lines.append(f"     serves only calls with {_served(impl)}; others go to the next")
        for impl, why in info["rejected"]:
            if impl.impl_id in stubs:
                why = f"{why}; {_stub_note(impl, stubs)}"
            lines.append(
                f"  -  {impl.impl_id:<24} kind={impl.kind.value:<9} vendor={str(impl.vendor):<7}"
                f" priority={impl.priority:<4} {why}{_origin(manager, impl)}"
            )
        sel = info["selected"]
        lines.append(f"  selected: {sel if sel else 'none (no implementation can run here)'}")
        if info["selected_traced"] != sel:
            lines.append(
                f"  under torch.compile: {info['selected_traced']} (order "
                f"{' > '.join(info['traced_order'])} from compile_prefer={policy.compile_prefer}"
                f" ({policy.sources.get('compile_prefer', 'default')}))"
            )
        if op in used and used[op] != sel:
            lines.append(f"  running now: {used[op]} (after a fallback)")
    if not manager.registry.list_operators():
        lines += ["", "No operators registered."]
    return "\n".join(lines) + "\n"


def _named(impl_id: str | None, stubs: dict) -> str:
    if impl_id is None:
        return "none"
    return f"{impl_id} (stub)" if impl_id in stubs else impl_id


def explain_table(manager: OpManager | None = None) -> str:
    """One line per op: the selection, and the candidates. A column for calls traced by
    torch.compile appears when the policy selects differently for them (``compile_prefer``).
    An impl that is still a scaffolded stub reads ``<impl id> (stub)``."""
    infos = explain_ops(manager)
    split = any(info["selected_traced"] != info["selected"] for info in infos)
    head = ("op", "selected impl") + (("under torch.compile",) if split else ())
    rows = [head + ("candidates (best first) [not candidates]",)]
    for info in infos:
        stubs = info["stubs"]
        cands = " > ".join(_named(i.impl_id, stubs) for i in info["candidates"]) or "-"
        if info["rejected"]:
            cands += " [" + ", ".join(_named(i.impl_id, stubs) for i, _ in info["rejected"]) + "]"
        traced = (_named(info["selected_traced"], stubs),) if split else ()
        rows.append((info["op"], _named(info["selected"], stubs)) + traced + (cands,))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    out = [" | ".join(f"{c:<{w}}" for c, w in zip(r, widths)) + f" | {r[-1]}" for r in rows]
    out.insert(1, "-+-".join("-" * w for w in widths) + "-+-" + "-" * 40)
    return "\n".join(out) + "\n"

"""Helpers shared by the dispatch tests (imported as ``dispatch_helpers``)."""

from __future__ import annotations

import types

import vllm_fl.dispatch as d
from vllm_fl.dispatch import (
    OpImpl,
    OpManager,
    OpRegistry,
    SelectionPolicy,
    dispatch_method,
    load_config,
)


def cfg(**env):
    """``load_config`` of ``env`` on the cpu platform."""
    return load_config({"VLLM_FL_PLATFORM": "cpu", **env})


def write(tmp_path, name, data):
    """``tmp_path/name`` holding ``data`` (text or bytes); returns its path."""
    p = tmp_path / name
    if isinstance(data, bytes):
        p.write_bytes(data)
    else:
        p.write_text(data)
    return str(p)


def user_file(tmp_path, data, name="c.yaml"):
    """The configuration with ``VLLM_FL_CONFIG`` naming a file that holds ``data``."""
    return cfg(VLLM_FL_CONFIG=write(tmp_path, name, data))


def module(name, register):
    """A module ``name`` exposing ``register`` (none when None)."""
    mod = types.ModuleType(name)
    if register is not None:
        mod.register = register
    return mod


def plugin_impl(op: str):
    """A reference impl of ``op``, as a plugin registers it."""
    return OpImpl(op, "reference.plugin", "reference", lambda x: op)


def build_default(env, **vars):
    """Set ``vars`` in ``env`` (a monkeypatch), re-read the policy and build a fresh default
    manager."""
    for k, v in vars.items():
        env.setenv(k, v)
    d.reset_global_policy()
    d.reset_default_manager()
    d.get_default_manager()


# --------------------------------------------------------------------------- one op, four impls


def fn(self, x):
    return x


def impl(impl_id, kind, vendor=None, priority=None, available=None, op="op"):
    return OpImpl(op, impl_id, kind, fn, vendor=vendor, priority=priority, available=available)


def manager(*impls):
    reg = OpRegistry()
    reg.register_many(impls)
    return OpManager(registry=reg)


ALL = lambda: [  # noqa: E731
    impl("default.flagos", "flagos"),
    impl("vendor.cuda", "vendor", "cuda"),
    impl("vendor.ascend", "vendor", "ascend"),
    impl("reference.torch", "reference"),
]


def order(m, op="op"):
    return [i.impl_id for i in m.resolve_candidates(op)]


# --------------------------------------------------------------------------- vendors only


def _identity(x):
    return x


def vendor_manager(*vendors):
    reg = OpRegistry()
    reg.register_many(
        [OpImpl("op", f"vendor.{v}", "vendor", _identity, vendor=v) for v in vendors]
        + [OpImpl("op", "reference.torch", "reference", _identity)]
    )
    return OpManager(registry=reg)


def candidates(manager):
    return [i.impl_id for i in manager.evaluate("op")[0]]


# --------------------------------------------------------------------------- layers


def norm_layer(op="rms_norm", reg=None):
    """(manager, Layer class, calls): a flagos and a reference impl of a norm op that record
    which one ran (registered into ``reg``, default a new registry), and a layer class whose
    forward_oot dispatches it."""
    calls = []

    def mk(tag):
        def norm(self, x, residual=None):
            calls.append((tag, self))
            return tag if residual is None else (tag, residual)

        return norm

    reg = OpRegistry() if reg is None else reg
    reg.register_many(
        [
            OpImpl(op, "default.flagos", "flagos", mk("flagos")),
            OpImpl(op, "reference.torch", "reference", mk("reference")),
        ]
    )
    m = OpManager(registry=reg)

    class Layer:
        forward_oot = dispatch_method(op, manager=m)

    return m, Layer, calls


SPLIT = SelectionPolicy.from_dict(prefer="flagos", compile_prefer="reference")


def act_manager(fail_eager=False):
    """(manager, Act module class, calls): flagos (x2), vendor (x5) and reference (x3) impls of
    op ``act``; with ``fail_eager`` flagos raises outside a torch.compile trace."""
    import torch

    calls = []

    def flagos(self, x):
        calls.append("flagos")
        if fail_eager and not torch.compiler.is_compiling():
            raise RuntimeError("kernel failed")
        return x * 2

    def vendor(self, x):
        calls.append("vendor")
        return x * 5

    def reference(self, x):
        calls.append("reference")
        return x * 3

    reg = OpRegistry()
    reg.register_many(
        [
            OpImpl("act", "default.flagos", "flagos", flagos),
            OpImpl("act", "vendor.cuda", "vendor", vendor, vendor="cuda"),
            OpImpl("act", "reference.torch", "reference", reference),
        ]
    )
    m = OpManager(registry=reg)

    class Act(torch.nn.Module):
        forward_oot = dispatch_method("act", manager=m)

        def forward(self, x):
            return self.forward_oot(x)

    return m, Act, calls

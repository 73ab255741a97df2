"""Call sites: which module of the model a verified call came from.

A layer op's call carries its layer (``self``): its site is the layer's path in the model
(``model.layers.3.mlp.act_fn``), read once when the model is built (``name_model``). vLLM shares
some layers between blocks (its rotary embeddings are cached by configuration); such a layer is
named under the block that runs it (``model.layers.3.self_attn.rotary_emb``). A function op
(the MoE family) has no layer: its site is the module owning a weight it is given
(``fused_experts``' ``w1``: the MoE layer, ``model.layers.3.mlp.experts``), else the MoE layer or
block running (hooks on them record it), else ``-``. The hooks exist only where verification is on and
do nothing inside a torch.compile trace. Layers outside a named model are named by class and the
order they were first seen (``RMSNorm#0``).
"""

from __future__ import annotations

import threading
from typing import Any

import torch

__all__ = ["Sites"]


def _is_moe(module: torch.nn.Module) -> bool:
    return hasattr(module, "w13_weight") and hasattr(module, "quant_method")


class Sites:
    """Layer -> path, and the block / MoE layer running now (a stack, per thread)."""

    def __init__(self) -> None:
        self._paths: dict[int, tuple[str, ...]] = {}
        self._anonymous: dict[int, str] = {}
        self._counts: dict[str, int] = {}
        self._local = threading.local()
        self._hooks: list[Any] = []
        self._owners: dict[int, str] = {}  # parameter -> the path of the module holding it

    def _stack(self) -> list[str]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def name_model(self, model: torch.nn.Module, hooks: bool = True) -> int:
        """Learn every module's path(s); with ``hooks``, hook the blocks (children of a
        ModuleList) and the MoE layers so that calls without a layer know where they run (not
        in a compiled model: a hook added after compilation would make Dynamo recompile).
        Returns the modules named."""
        paths: dict[int, list[str]] = {}
        for name, module in model.named_modules(remove_duplicate=False):
            paths.setdefault(id(module), []).append(name)
        self._paths.update({key: tuple(names) for key, names in paths.items()})
        for name, param in model.named_parameters():
            self._owners[id(param)] = name.rpartition(".")[0]
        for name, module in model.named_modules() if hooks else ():
            if isinstance(module, torch.nn.ModuleList):
                for child_name, child in module.named_children():
                    self._hook(child, f"{name}.{child_name}" if name else child_name)
            elif _is_moe(module):
                self._hook(module, name)
        return len(paths)

    def _hook(self, module: torch.nn.Module, path: str) -> None:
        def enter(_module, _args):
            if not torch.compiler.is_compiling():
                self._stack().append(path)

        def leave(_module, _args, _output):
            if not torch.compiler.is_compiling():
                stack = self._stack()
                if stack and stack[-1] == path:
                    stack.pop()

        self._hooks.append(module.register_forward_pre_hook(enter))
        self._hooks.append(module.register_forward_hook(leave))

    def remove_hooks(self) -> None:
        for handle in self._hooks:
            handle.remove()
        self._hooks.clear()

    def of_layer(self, layer: Any) -> str:
        """The path of ``layer`` (under the running block when several blocks share it)."""
        paths = self._paths.get(id(layer))
        if paths:
            if len(paths) > 1:
                for running in reversed(self._stack()):
                    for path in paths:
                        if path.startswith(running + "."):
                            return path
            return paths[0]
        name = self._anonymous.get(id(layer))
        if name is None:
            cls = type(layer).__name__
            index = self._counts.get(cls, 0)
            self._counts[cls] = index + 1
            name = self._anonymous[id(layer)] = f"{cls}#{index}"
        return name

    def current(self, args: Any = ()) -> str:
        """Where a call without a layer runs: the module owning a weight among ``args``, else
        the innermost MoE layer or block running, else ``-``."""
        for value in args:
            if isinstance(value, torch.nn.Parameter):
                owner = self._owners.get(id(value))
                if owner is not None:
                    return owner
        stack = self._stack()
        return stack[-1] if stack else "-"

"""What a quantization format module declares: the plugin's kernel classes for vLLM's tables."""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class PluginKernel:
    """One of the plugin's quantized-linear kernel classes.

    ``table`` is the vLLM kernel table (``_POSSIBLE_INT8_KERNELS``, ...) whose out-of-tree row it
    heads; ``name`` the class, an attribute of ``module`` (built lazily there: its vLLM base class
    needs vLLM); ``format`` what it computes and through which ops, for the log line and the docs.
    """

    table: str
    name: str
    module: str
    format: str

    def load(self) -> type:
        """The kernel class (built on first use)."""
        return getattr(importlib.import_module(self.module), self.name)

"""What a quantization format module declares: the plugin's kernel classes for vLLM's tables."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PluginKernel:
    """One of the plugin's quantized-linear kernel classes.

    ``table`` is the vLLM kernel table (``_POSSIBLE_INT8_KERNELS``, ...) whose out-of-tree row
    ``kernel`` heads; ``format`` what it computes and through which ops, for the log line and the
    docs.
    """

    table: str
    kernel: type
    format: str

    @property
    def name(self) -> str:
        """The kernel class's name."""
        return self.kernel.__name__

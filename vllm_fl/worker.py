"""Workers of the plugin's platforms.

`CPUWorkerFL` is vLLM's CPU worker for the CPU host mode (`vllm_fl.platform.PlatformFLCpu`).
vLLM's GPU worker, which the CPU worker extends, wraps weight loading and KV-cache allocation
in `_maybe_get_memory_pool_context`, which returns a null context only for in-tree platforms
it recognises (`is_cpu()`, CUDA without cumem, XPU without sleep mode); on an out-of-tree
platform it would reach for the sleep-mode allocator, which does not exist on CPU. Here the
context is always a null context. The CUDA platform keeps vLLM's GPU worker unchanged.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

from vllm_fl import compat


class CPUWorkerFL(compat.cpu_worker_cls()):
    """vLLM's CPU worker with a null memory-pool context (no sleep-mode allocator on CPU)."""

    def _maybe_get_memory_pool_context(self, tag: str) -> AbstractContextManager:
        return nullcontext()

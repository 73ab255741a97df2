"""A stand-in for the plugin's platforms in tests of what reads only the platform's kind."""

from __future__ import annotations


class FakePluginPlatform:
    """Stands for vllm_fl.platform.PlatformFL (``cuda``) or PlatformFLCpu: it answers
    `vllm_fl.platform.is_plugin_platform` and the kind questions vLLM's quantization code asks
    (neither CPU nor XPU, as the plugin's platforms answer)."""

    __module__ = "vllm_fl.platform"

    def __init__(self, cuda: bool):
        self._cuda = cuda

    def is_cuda(self) -> bool:
        return self._cuda

    def is_cpu(self) -> bool:
        return False

    def is_xpu(self) -> bool:
        return False

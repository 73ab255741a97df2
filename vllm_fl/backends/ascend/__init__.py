"""Ascend vendor backend (``vendor:ascend``): ``torch_npu`` kernels, as vllm-ascend uses them.

``torch_npu`` is imported inside function bodies only (installing it without an NPU breaks
``import torch``), so this package imports on any machine.
"""

"""Reference backend: plain PyTorch implementations, always available.

Each function equals vLLM's in-tree ``forward_native`` of the layer it replaces (same dtype
handling), and is functional: it never mutates its inputs and never returns an input tensor.
"""

"""CUDA vendor backend (``vendor:cuda``): vLLM's compiled kernels (``vllm._custom_ops``)."""

"""vLLM out-of-tree plugin: operators dispatched between FlagGems, vendor kernels and a PyTorch reference."""

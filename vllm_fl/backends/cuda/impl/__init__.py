"""Hand-written CUDA vendor implementations, one module per op family."""

"""Hand-written Ascend vendor implementations, one module per op family."""

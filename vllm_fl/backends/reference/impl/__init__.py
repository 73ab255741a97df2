"""Hand-written reference implementations, one module per op family."""

"""Hand-written FlagGems implementations, one module per op family."""

"""Vendor backends: a chip vendor's own kernels, one subpackage per vendor."""

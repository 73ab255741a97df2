"""FlagGems backend (``flagos``): operators backed by ``flag_gems`` Triton kernels.

``flag_gems`` probes the GPU when imported, so the impl modules import it inside function
bodies only; this package imports on any machine.
"""

"""The backends built into vllm_fl, one package each: ``flaggems`` (FlagGems and the plugin's own
kernel library), ``reference`` (PyTorch), and the vendors ``cuda`` and ``ascend``.

Each package holds its hand-written ``impl/`` functions, its generated ``register_ops.py`` and,
optionally, a ``BACKEND`` declaring hooks. The dispatch imports none of them statically: it loads
them by name from the generated ``vllm_fl.dispatch.builtin_backends``, as it loads plugins.
"""

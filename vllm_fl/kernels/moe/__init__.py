"""Mixture-of-experts kernels: FlagGems' fused experts and MoE kernels through launch plans.

- ``launch``: FlagGems' MoE kernels (staged block alignment, top-k softmax, ``moe_sum``)
  launched through launch plans.
- ``experts``: FlagGems' unquantized fused-experts sequence (alignment, two grouped GEMMs,
  activation, top-k sum) with every kernel launched through launch plans, and the token counts
  that warm a layer's kernel variants up before serving.
- ``tuned_configs``: the tuned GEMM configs per device and experts' shape (``tuned/*.json``).
- ``tune``: the tuner that measures those configs on a GPU and writes ``tuned/``
  (``python -m vllm_fl.kernels.moe.tune``).
"""

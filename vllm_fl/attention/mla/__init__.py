"""The plugin's MLA attention backend: DeepSeek's multi-head latent attention on the dispatch.

``backend.MLABackendFL`` is vLLM's Triton MLA backend (its metadata builder, its latent-cache
layout, its CUDA-graph support, vLLM's shared MLA layer code around it) whose parts run through
dispatched ops of ``ops.yaml``: the cache write ``concat_and_cache_mla``, the decode
``mla_decode_attention``, and a prefill backend of the plugin's own (``prefill.MLAPrefillBackendFL``)
whose attention is ``mla_prefill_attention``. The rest of vLLM's MLA prefill, reading the context
back from the cache and merging partial results, calls ``gather_and_maybe_dequant_cache`` and
``merge_attn_states``, vLLM functions the plugin routes through the dispatch. Which kernels run
is then the dispatch's choice: the reference on the CPU, portable Triton kernels (FlagGems' and
vLLM's) for flagos, vLLM's CUDA kernels and FlashAttention for cuda.

vLLM resolves the backend by the class path the platform returns, which the dispatch op
``attention_backend`` supplies for MLA layers (``vllm_fl.platform``): ``MLA_BACKEND`` from the
flagos and reference impls; the cuda impl keeps vanilla vLLM's FlashAttention MLA backend, so the
shipped policy serves MLA models as vanilla vLLM does. vLLM wraps an MLA layer's cache write and
attention in its own opaque custom ops (``unified_mla_kv_cache_update``,
``unified_mla_attention_with_output``), so under ``torch.compile`` and in CUDA graphs the ops run
inside those nodes.

This package's ``__init__`` imports nothing of vLLM; ``backend`` and ``prefill`` are imported
where vLLM builds the model.
"""

#: the class path of the plugin's MLA attention backend
MLA_BACKEND = "vllm_fl.attention.mla.backend.MLABackendFL"

"""The plugin's attention backend: vLLM's paged attention on the dispatch.

``backend.AttentionBackendFL`` is vLLM's Triton attention backend (its metadata builder, its
KV-cache layout, its CUDA-graph support) with an impl of the plugin's own, whose forward calls
two dispatched ops of ``ops.yaml``: ``reshape_and_cache_flash`` writes a step's keys and values
into the paged KV cache and ``paged_attention`` attends over it, prefills and decodes in one
call; encoder-only layers (BERT's), which have no KV cache, attend with ``varlen_attention``
over the step's own keys and values. Which kernels run is then the dispatch's choice: the
reference on the CPU, vLLM's portable Triton kernels and FlagGems' (flagos), FlashAttention and
vLLM's CUDA cache write (cuda).

vLLM resolves the backend by the class path the platform returns, which the dispatch op
``attention_backend`` supplies (``vllm_fl.platform``): ``PLUGIN_BACKEND`` from the flagos and
reference impls. vLLM wraps every attention layer's forward and cache write in its own opaque
custom ops (``unified_attention_with_output``, ``unified_kv_cache_update``), so under
``torch.compile`` and in CUDA graphs the two ops run inside those single nodes.

This package's ``__init__`` imports nothing of vLLM; ``backend`` is imported where vLLM builds
the model.
"""

#: the class path of the plugin's attention backend
PLUGIN_BACKEND = "vllm_fl.attention.backend.AttentionBackendFL"

"""Which of vLLM's own kernels still run in a model under the plugin (torch profiler).

`census_task` is an engine task (`Workload.task`, run inside `vllm_fl.testing.engine` with the
engine in that process, ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, since the profiler sees only its own
process): after a warm-up it generates the workload's batch under ``torch.profiler`` and counts
the operator events of vLLM's compiled libraries (``_moe_C::*``, ``_C::*``, ``_C_cache_ops::*``,
FlashAttention's ``_vllm_fa2_C::*``/``_vllm_fa3_C::*``) and of vLLM's own custom ops
(``vllm::*``), separately for the ones that belong to the MoE computation (routing, alignment,
expert GEMMs, sums), to attention (its kernels and the KV-cache writes) and the rest. The
layers' own wrappers (``vllm::moe_forward``, ``vllm::unified_attention_with_output``, ...: vLLM's
opaque custom ops the plugin's code runs inside) are left out. The plugin's policy is the
engine's environment.
"""

from __future__ import annotations

import collections

#: the engine task of this module, for `Workload.task`
TASK = "vllm_fl.testing.census:census_task"
#: the namespaces of vLLM's compiled libraries and of its own custom ops
VLLM_NAMESPACES = ("_moe_C::", "_C::", "_C_cache_ops::", "_vllm_fa2_C::", "_vllm_fa3_C::", "vllm::")
#: vLLM op names that are part of the MoE computation
MOE_MARKERS = ("moe", "topk", "expert", "align_block")
#: vLLM op names of attention kernels and KV-cache writes (all of FlashAttention's)
ATTENTION_MARKERS = ("attn", "attention", "cache", "_fa2_c::", "_fa3_c::")
#: the layers' own wrappers: vLLM's opaque custom ops around a whole MoE block or an attention
#: layer's cache write and attention (ours runs inside)
LAYER_WRAPPERS = (
    "vllm::moe_forward",
    "vllm::moe_forward_shared",
    "vllm::unified_attention",
    "vllm::unified_attention_with_output",
    "vllm::unified_kv_cache_update",
)


def census(events) -> dict[str, dict[str, int]]:
    """vLLM op events (the profiler's ``key_averages()``) by name, split into MoE kernels,
    attention kernels and the rest."""
    found: dict[str, collections.Counter[str]] = {
        part: collections.Counter() for part in ("moe", "attention", "other")
    }
    for event in events:
        name = event.key
        if not name.startswith(VLLM_NAMESPACES) or name in LAYER_WRAPPERS:
            continue
        lower = name.lower()
        if any(m in lower for m in MOE_MARKERS):
            part = "moe"
        elif any(m in lower for m in ATTENTION_MARKERS):
            part = "attention"
        else:
            part = "other"
        found[part][name] += event.count
    return {part: dict(counts) for part, counts in found.items()}


def census_task(llm, workload) -> dict:
    """In the engine's process: one warm-up prompt, then the workload's batch under the
    profiler; the census, the numbers of MoE and attention kernel calls, and the impl each op
    used."""
    import torch

    from vllm_fl.testing.engine import prompts, sampling_params

    batch = prompts(workload)
    params = sampling_params(workload.max_tokens, workload.detokenize)
    llm.generate(batch[:1], params, use_tqdm=False)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as profiler:
        llm.generate(batch, params, use_tqdm=False)
    result: dict = census(profiler.key_averages())
    result["moe_kernel_calls"] = sum(result["moe"].values())
    result["attention_kernel_calls"] = sum(result["attention"].values())
    return result

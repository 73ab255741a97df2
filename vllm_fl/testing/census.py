"""Which of vLLM's own kernels still run in a model under the plugin (torch profiler).

`census_task` is an engine task (`Workload.task`, run inside `vllm_fl.testing.engine` with the
engine in that process, ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, since the profiler sees only its own
process): after a warm-up it generates the workload's batch under ``torch.profiler`` and counts
the operator events of vLLM's compiled libraries (``_moe_C::*``, ``_C::*``) and of vLLM's own
custom ops (``vllm::*``), separately for the ones that belong to the MoE computation (routing,
alignment, expert GEMMs, sums) and the rest (attention, cache writes, the ``vllm::moe_forward``
wrapper of the layer itself). The plugin's policy is the engine's environment.
"""

from __future__ import annotations

import collections

#: the engine task of this module, for `Workload.task`
TASK = "vllm_fl.testing.census:census_task"
#: vLLM op names that are part of the MoE computation (everything else is counted apart)
MOE_MARKERS = ("moe", "topk", "expert", "align_block")
#: the layer's own wrapper: vLLM's opaque custom op around the whole MoE block (ours runs inside)
LAYER_WRAPPERS = ("vllm::moe_forward", "vllm::moe_forward_shared")


def census(events) -> dict[str, dict[str, int]]:
    """vLLM op events (the profiler's ``key_averages()``) by name, split into MoE kernels and
    the rest."""
    moe: collections.Counter[str] = collections.Counter()
    other: collections.Counter[str] = collections.Counter()
    for event in events:
        name = event.key
        if not name.startswith(("_moe_C::", "_C::", "vllm::")) or name in LAYER_WRAPPERS:
            continue
        (moe if any(m in name.lower() for m in MOE_MARKERS) else other)[name] += event.count
    return {"moe": dict(moe), "other": dict(other)}


def census_task(llm, workload) -> dict:
    """In the engine's process: one warm-up prompt, then the workload's batch under the
    profiler; the census, the number of MoE kernel calls, and the impl each op used."""
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
    return result

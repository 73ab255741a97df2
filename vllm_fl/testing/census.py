"""Which of vLLM's own kernels still run in a model under the plugin (torch profiler).

`census_task` is an engine task (`Workload.task`, run inside `vllm_fl.testing.engine` with the
engine in that process, ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, since the profiler sees only its own
process): after a warm-up it generates the workload's batch under ``torch.profiler`` and counts
the operator events of vLLM's compiled libraries (``_moe_C::*``, ``_C::*``, ``_C_cache_ops::*``,
FlashAttention's ``_vllm_fa2_C::*``/``_vllm_fa3_C::*``) and of vLLM's own custom ops
(``vllm::*``), separately for the ones that belong to the MoE computation (routing, alignment,
expert GEMMs, sums), to attention (its kernels and the KV-cache writes) and the rest. The
layers' own wrappers (``vllm::moe_forward``, ``vllm::unified_attention_with_output``, their MLA
counterparts, ...: vLLM's opaque custom ops the plugin's code runs inside) are left out. The
plugin's policy is the engine's environment.

On a GPU it also sorts every CUDA kernel that ran by where it comes from (`kernel_origin`):
ATen (with CUB and the copies), cuBLAS, Triton (a JIT kernel: a bare function name), or compiled
C++ of anything else — vLLM's ``_C``/``_moe_C`` kernels, the DeepGEMM, CUTLASS and FlashAttention
kernels it bundles: what a chip without vLLM's CUDA build cannot run. And it keeps each sequence's
greedy tokens and their log-probabilities, so configurations can be compared
(`compare_outputs`); an embedding model (``llm_args["runner"] == "pooling"``) embeds the batch
instead and keeps the embeddings (`compare_embeddings`).
"""

from __future__ import annotations

import collections
import math
import re

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
    "vllm::unified_mla_attention_with_output",
    "vllm::unified_mla_kv_cache_update",
)


#: kernel origins, in the order `kernel_origin` tries them
ORIGINS = ("aten", "cublas", "triton", "compiled")
#: the log-probabilities kept per sequence (the first tokens, where the sequences have not
#: drifted apart yet)
LOGPROB_TOKENS = 8

# (c10:: alone is no mark of ATen: vLLM's global-namespace kernels take c10 types as template
# arguments, e.g. per_token_group_quant_8bit_kernel<c10::BFloat16, c10::Float8_e4m3fn, ...>)
_ATEN = ("at::", "at_cuda_detail", "cub::", "Memcpy", "Memset", "memcpy", "memset")
_CUBLAS = (
    "nvjet_",
    "xmma_gemm",
    "gemv",
    "gemmk",
    "cublas",
    "splitKreduce",
    "cutlass3x_sm90_tensorop",
)
_JIT_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def kernel_origin(name: str) -> str:
    """Where a CUDA kernel (its profiler name) comes from: ``aten``, ``cublas``, ``triton`` or
    ``compiled`` (C++ from any other library: vLLM's own, DeepGEMM, CUTLASS, FlashAttention).

    A Triton kernel shows as its JIT function's bare name (``_rms_norm_kernel``,
    ``triton_poi_fused_add_0``); compiled C++ shows demangled (``void vllm::rms_norm_kernel<...>
    (...)``). A C++ kernel of vLLM's CUTLASS GEMMs names ``vllm::`` in its template arguments, so
    only cuBLAS's own kernel families count as cuBLAS.
    """
    if any(marker in name for marker in _ATEN) and "vllm" not in name:
        return "aten"
    if any(marker in name for marker in _CUBLAS) and "vllm" not in name:
        return "cublas"
    if _JIT_NAME.match(name):
        return "triton"
    return "compiled"


def kernel_census(events) -> dict[str, dict[str, int]]:
    """CUDA kernel events (the profiler's ``key_averages()``) by origin, then name -> calls."""
    import torch

    kernels: dict[str, collections.Counter[str]] = {o: collections.Counter() for o in ORIGINS}
    for event in events:
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        kernels[kernel_origin(event.key)][event.key] += event.count
    return {origin: dict(counts) for origin, counts in kernels.items()}


def sequence_outputs(outputs) -> list[dict]:
    """Each sequence's token ids and the log-probability of each of its first tokens."""
    sequences = []
    for output in outputs:
        completion = output.outputs[0]
        logprobs = [
            step[token].logprob
            for token, step in zip(completion.token_ids, completion.logprobs or [])
        ][:LOGPROB_TOKENS]
        sequences.append({"token_ids": list(completion.token_ids), "logprobs": logprobs})
    return sequences


def compare_outputs(reference: list[dict], other: list[dict]) -> dict:
    """How far `other`'s sequences are from `reference`'s: how many are identical, how many
    tokens agree before the first difference (summed over sequences), and the largest difference
    of log-probabilities over the first tokens both sequences share."""
    if len(reference) != len(other):
        raise ValueError(f"{len(other)} sequences against {len(reference)}")
    identical = agreeing = total = 0
    largest = 0.0
    for ref, seq in zip(reference, other):
        ids, ref_ids = seq["token_ids"], ref["token_ids"]
        common = next(
            (i for i, (a, b) in enumerate(zip(ids, ref_ids)) if a != b), min(len(ids), len(ref_ids))
        )
        identical += ids == ref_ids
        agreeing += common
        total += len(ref_ids)
        # the log-probability of a position is comparable while the prefixes agree
        for a, b in list(zip(seq["logprobs"], ref["logprobs"]))[: common + 1]:
            if math.isfinite(a) and math.isfinite(b):
                largest = max(largest, abs(a - b))
    return {
        "sequences": len(reference),
        "identical": identical,
        "tokens_agreeing": agreeing,
        "tokens": total,
        "max_logprob_diff": largest,
    }


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
    """In the engine's process: a warm-up batch, then the workload's batch under the
    profiler; the census, the numbers of MoE and attention kernel calls, the CUDA kernels by
    origin (on a GPU), each sequence's tokens and first log-probabilities, and the impl each op
    used."""
    import torch

    from vllm_fl.testing.engine import WARMUP_SEED, prompts, sampling_params

    batch = prompts(workload)
    if workload.llm_args.get("runner") == "pooling":
        # an embedding model (BERT, Qwen3-Embedding): no tokens to generate, its embeddings
        def run(prompts_: list) -> list:
            return llm.embed(prompts_, use_tqdm=False)

    else:
        params = sampling_params(workload.max_tokens, workload.detokenize, logprobs=1)

        def run(prompts_: list) -> list:
            return llm.generate(prompts_, params, use_tqdm=False)

    # Random token-id prompts warm up with a batch of the same shape (what autotuning kernels
    # tune for: their first calls of a shape stay out of the census) but other tokens (not
    # served from vLLM's prefix cache); text prompts, fixed, with one prompt.
    warm_up = prompts(workload, WARMUP_SEED) if workload.prompt_len is not None else batch[:1]
    run(warm_up)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as profiler:
        outputs = run(batch)
    events = profiler.key_averages()
    result: dict = census(events)
    result["moe_kernel_calls"] = sum(result["moe"].values())
    result["attention_kernel_calls"] = sum(result["attention"].values())
    if torch.cuda.is_available():
        result["kernels"] = kernel_census(events)
    if workload.llm_args.get("runner") == "pooling":
        result["embeddings"] = [[float(x) for x in out.outputs.embedding] for out in outputs]
    else:
        result["sequences"] = sequence_outputs(outputs)
    return result


def compare_embeddings(reference: list[list[float]], other: list[list[float]]) -> dict:
    """How far `other`'s embeddings are from `reference`'s: the largest difference of one
    component and the smallest cosine similarity of two embeddings of the same prompt."""
    if len(reference) != len(other):
        raise ValueError(f"{len(other)} embeddings against {len(reference)}")
    largest, lowest = 0.0, 1.0
    for ref, emb in zip(reference, other):
        largest = max([largest, *(abs(a - b) for a, b in zip(ref, emb))])
        norms = math.sqrt(sum(a * a for a in ref)) * math.sqrt(sum(b * b for b in emb))
        cosine = sum(a * b for a, b in zip(ref, emb)) / norms if norms else 0.0
        lowest = min(lowest, cosine)
    return {"embeddings": len(reference), "max_abs_diff": largest, "min_cosine": lowest}

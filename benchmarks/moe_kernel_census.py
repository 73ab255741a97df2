"""Which of vLLM's own kernels still run in a model under the plugin (torch profiler).

Builds a Qwen3-MoE-shaped engine (``--shape`` another, ``--quant`` a quantized checkpoint) with dummy weights in this process (the profiler sees only its
own process, so VLLM_ENABLE_V1_MULTIPROCESSING=0 here), generates a few tokens under
``torch.profiler`` and counts the operator events of vLLM's compiled libraries (``_moe_C::*``,
``_C::*``) and of vLLM's own custom ops (``vllm::*``), separately for the ones that belong to the
MoE computation (routing, alignment, expert GEMMs, sums) and the rest (attention, cache writes,
the ``vllm::moe_forward`` wrapper of the layer itself). Set the plugin's policy through the
environment:

    VLLM_FL_PREFER=flagos VLLM_FL_DENY_VENDORS=cuda python benchmarks/moe_kernel_census.py
    VLLM_PLUGINS=none python benchmarks/moe_kernel_census.py       # vanilla vLLM, for contrast

Prints one JSON line ``MOE_CENSUS {...}``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
from pathlib import Path

from harness import write_json
from shapes import MODELS, QUANTIZATIONS, model_config
from vllm_runner import build_llm, sampling_params

#: vLLM op names that are part of the MoE computation (everything else is counted apart)
MOE_MARKERS = ("moe", "topk", "expert", "align_block")
#: the layer's own wrapper: vLLM's opaque custom op around the whole MoE block (ours runs inside)
LAYER_WRAPPERS = ("vllm::moe_forward", "vllm::moe_forward_shared")


def census(events) -> dict[str, dict[str, int]]:
    """vLLM op events by name, split into MoE kernels and the rest."""
    moe: collections.Counter[str] = collections.Counter()
    other: collections.Counter[str] = collections.Counter()
    for event in events:
        name = event.key
        if not name.startswith(("_moe_C::", "_C::", "vllm::")) or name in LAYER_WRAPPERS:
            continue
        (moe if any(m in name.lower() for m in MOE_MARKERS) else other)[name] += event.count
    return {"moe": dict(moe), "other": dict(other)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(MODELS), default="qwen3-moe")
    parser.add_argument("--quant", choices=sorted(QUANTIZATIONS), help="a quantized checkpoint")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--model", help="a model directory instead of the Qwen3-MoE shape")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--output-len", type=int, default=8)
    args = parser.parse_args(argv)
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")

    import torch

    model_dir = args.model
    if model_dir is None:
        model_dir = tempfile.mkdtemp(prefix=f"{args.shape}-census-")
        write_json(
            Path(model_dir, "config.json"), model_config(args.shape, args.layers, args.quant)
        )
    llm = build_llm(
        model_dir,
        "eager",
        {
            "load_format": "dummy",
            "skip_tokenizer_init": True,
            "dtype": args.dtype,
            "max_model_len": 256,
            "gpu_memory_utilization": 0.5,
        },
    )
    # token ids below 310: inside the vocabulary of the tiny test model too
    prompts = [
        {"prompt_token_ids": [(7 * i + j) % 300 + 10 for j in range(64)]}
        for i in range(args.prompts)
    ]
    params = sampling_params(args.output_len, detokenize=False)
    llm.generate(prompts[:1], params, use_tqdm=False)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        llm.generate(prompts, params, use_tqdm=False)
    result = census(prof.key_averages())
    try:
        from vllm_fl.dispatch import used_impls

        result["used_impls"] = used_impls()
    except ImportError:
        pass
    result["moe_kernel_calls"] = sum(result["moe"].values())
    print("MOE_CENSUS " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

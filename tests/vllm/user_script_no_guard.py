"""A vLLM user's script as vLLM's quickstart has it: module-level code, no
``if __name__ == "__main__":`` guard, vLLM's default process layout (V1 multiprocessing on: the
engine core runs in its own process). ``test_vllm_gpu_user_script.py`` runs it with and without
the plugin; it is not collected by pytest.

What varies comes from the environment: USER_SCRIPT_MODEL (a model directory), USER_SCRIPT_TP
(tensor_parallel_size), USER_SCRIPT_MODE (eager or compile). The last line it prints is
``USER_SCRIPT_RESULT {json}``: startup seconds, the greedy tokens, vLLM's platform class.
"""

import json
import os
import time

from vllm import LLM, SamplingParams

start = time.perf_counter()
llm = LLM(
    model=os.environ["USER_SCRIPT_MODEL"],
    dtype="bfloat16",
    max_model_len=128,
    tensor_parallel_size=int(os.environ.get("USER_SCRIPT_TP", "1")),
    enforce_eager=os.environ.get("USER_SCRIPT_MODE", "eager") == "eager",
    gpu_memory_utilization=0.3,
    seed=0,
)
startup_s = time.perf_counter() - start
params = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)
prompts = ["The quick brown fox", "Operators dispatch between", "Hello world!", "A tiny random"]
outputs = llm.generate(prompts, params, use_tqdm=False)

from vllm.platforms import current_platform  # noqa: E402  (resolved once the engine is up)

platform = type(current_platform)
result = {
    "startup_s": round(startup_s, 1),
    "tokens": [list(output.outputs[0].token_ids) for output in outputs],
    "platform": f"{platform.__module__}.{platform.__name__}",
}
print("USER_SCRIPT_RESULT " + json.dumps(result), flush=True)

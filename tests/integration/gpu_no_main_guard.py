"""A user's script WITHOUT an `if __name__ == "__main__":` guard, on vLLM's default process layout
(V1 multiprocessing on: the engine core runs in its own process), with and without the plugin.

Not collected by pytest. Run on the GPU machine (vLLM and the project installed, see
../shared/tools/gpu-vllm/README.md):

    python tests/integration/gpu_no_main_guard.py [TP]

Run like that, it is the driver: it writes a Llama-3-8B-shaped config (dummy weights, no
tokenizer) and runs this same file twice as the user's script, once with VLLM_PLUGINS=none
(vanilla vLLM) and once with VLLM_PLUGINS=fl (the plugin, platform auto-detected), then prints one
line per run: exit code, startup seconds, the greedy tokens, whether they equal vanilla's, whether
vLLM logged "must use the spawn" (CUDA initialised in the front-end) or the bootstrapping error a
spawned child raises without a main guard, and the plugin's log lines with their process names.
With GPU_NMG_CHILD set it is the user's script: module-level code, no guard.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from shapes import LLAMA3_8B as LLAMA_8B  # noqa: E402  (one copy of the model shape)

RESULT = "GPU_NMG_RESULT "

if os.environ.get("GPU_NMG_CHILD"):
    # --- the user's script: what someone writes after reading vLLM's quickstart --------------
    from vllm import LLM, SamplingParams

    start = time.perf_counter()
    llm = LLM(
        model=os.environ["GPU_NMG_MODEL"],
        load_format="dummy",
        skip_tokenizer_init=True,
        dtype="bfloat16",
        max_model_len=1024,
        tensor_parallel_size=int(os.environ.get("GPU_NMG_TP", "1")),
        enforce_eager=os.environ.get("GPU_NMG_MODE", "eager") == "eager",
        seed=0,
    )
    startup_s = time.perf_counter() - start
    params = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True, detokenize=False)
    prompts = [{"prompt_token_ids": [128000 + i, 1000 + 7 * i, 2000 + 11 * i]} for i in range(4)]
    outputs = llm.generate(prompts, params, use_tqdm=False)
    tokens = [list(o.outputs[0].token_ids) for o in outputs]
    from vllm.platforms import current_platform

    print(
        RESULT
        + json.dumps(
            {"startup_s": round(startup_s, 1), "tokens": tokens,
             "platform": type(current_platform).__name__}
        ),
        flush=True,
    )
else:
    # --- the driver ----------------------------------------------------------------------------
    tp = sys.argv[1] if len(sys.argv) > 1 else "1"
    mode = sys.argv[2] if len(sys.argv) > 2 else "eager"
    model = Path(tempfile.mkdtemp(prefix="llama8b-shape-"))
    (model / "config.json").write_text(json.dumps(LLAMA_8B))
    base = {k: v for k, v in os.environ.items() if k not in ("VLLM_ENABLE_V1_MULTIPROCESSING",
                                                             "VLLM_WORKER_MULTIPROC_METHOD")}
    base.update({"GPU_NMG_CHILD": "1", "GPU_NMG_MODEL": str(model), "GPU_NMG_TP": tp,
                 "GPU_NMG_MODE": mode, "VLLM_USE_FLASHINFER_SAMPLER": "0"})
    vanilla_tokens = None
    for label, plugins in (("vanilla", "none"), ("plugin", "fl")):
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, __file__], env={**base, "VLLM_PLUGINS": plugins},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=540)
        wall = time.perf_counter() - start
        out = proc.stdout
        lines = [ln for ln in out.splitlines() if ln.startswith(RESULT)]
        result = json.loads(lines[-1][len(RESULT):]) if lines else {}
        if label == "vanilla":
            vanilla_tokens = result.get("tokens")
        print("GPU_NO_MAIN_GUARD " + json.dumps({
            "run": label, "tp": tp, "mode": mode, "rc": proc.returncode,
            "wall_s": round(wall, 1), "startup_s": result.get("startup_s"),
            "platform": result.get("platform"),
            "tokens": result.get("tokens"),
            "same_tokens_as_vanilla": result.get("tokens") == vanilla_tokens,
            "must_use_spawn": "must use the spawn" in out,
            "bootstrapping_error": "bootstrapping phase" in out,
            "plugin_log": [ln for ln in out.splitlines() if "vllm_fl" in ln][:30],
            "tail": out.splitlines()[-25:] if proc.returncode else [],
        }), flush=True)

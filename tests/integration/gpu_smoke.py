"""Real vLLM on a GPU machine, with and without the plugin's CUDA platform (PlatformFL).

Not collected by pytest (no test_ prefix): run on the device machine after installing vLLM and
the project (see ../shared/tools/gpu-vllm/README.md), with the tiny model built beforehand:

    python tests/integration/gpu_smoke.py MODEL_DIR

For eager and compile mode it runs greedy generation with VLLM_PLUGINS=none (vanilla vLLM) and
VLLM_PLUGINS=fl (the plugin, platform auto-detected), and prints one JSON line per run: the
platform, whether the tokens equal vanilla's, which forward method each CustomOp bound, the
dispatch's record, the plugin's log lines and the timings.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from vllm_harness import run_vllm  # noqa: E402


def main() -> int:
    model = Path(sys.argv[1])
    modes = sys.argv[2:] or ["eager", "compile"]
    base = {"VLLM_USE_FLASHINFER_SAMPLER": "0"}
    for mode in modes:
        vanilla = run_vllm(model, {**base, "VLLM_PLUGINS": "none"}, mode=mode, timeout=280)
        plugin = run_vllm(model, {**base, "VLLM_PLUGINS": "fl"}, mode=mode, timeout=280)
        for label, run in (("vanilla", vanilla), ("plugin", plugin)):
            r = run.result
            print(
                "GPU_SMOKE "
                + json.dumps(
                    {
                        "mode": mode,
                        "run": label,
                        "platform": r["platform"],
                        "same_tokens_as_vanilla": r["tokens"] == vanilla.result["tokens"],
                        "forward_methods": r.get("forward_methods"),
                        "layer_classes": r.get("layer_classes"),
                        "used_impls": r.get("used_impls"),
                        "wall_s": round(run.wall_s, 1),
                        "init_s": r["init_s"],
                        "tokens_per_s": r["tokens_per_s"],
                        "log": [ln for ln in run.output.splitlines() if "vllm_fl" in ln][:40],
                    }
                ),
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Loads vLLM's plugins the way vLLM's front-end does, in THIS process, and prints one JSON line:
which kernel libraries got imported, which torch.cuda functions were called, what the plugin
registered or resolved. Started in a fresh interpreter by test_front_end.py.

Plugin loading and platform resolution (`vllm.plugins.load_general_plugins()`,
`vllm.platforms.current_platform`) and building a configuration (`VllmConfig()`, which runs the
platform's `apply_config_platform_defaults` and `check_and_update_config`) are what a front-end
process does before it starts the engine core.
"""

from __future__ import annotations

import json
import sys
import traceback

import torch

CUDA_CALLS: list[str] = []  # the calls made from vllm_fl code (vLLM itself makes some too)
# Any of these may initialise the CUDA driver (or CUDA itself) in this process, after which vLLM
# must spawn instead of fork.
for _name in ("is_available", "device_count", "init", "_lazy_init", "current_device", "set_device"):
    _orig = getattr(torch.cuda, _name)

    def _recording(*args, _name=_name, _orig=_orig, **kwargs):
        frames = [f.filename for f in traceback.extract_stack()[:-1]]
        ours = [f for f in frames if "vllm_fl" in f and not f.endswith("front_end_probe.py")]
        if ours:
            CUDA_CALLS.append(f"{_name} from {ours[-1]}")
        return _orig(*args, **kwargs)

    setattr(torch.cuda, _name, _recording)

import vllm.plugins  # noqa: E402

vllm.plugins.load_general_plugins()
from vllm.platforms import current_platform  # noqa: E402

platform = f"{type(current_platform).__module__}.{type(current_platform).__name__}"
after_plugins = sorted(
    m for m in ("flag_gems", "vllm._custom_ops", "torch_npu", "vllm_fl.ops") if m in sys.modules
)

from vllm.config import VllmConfig  # noqa: E402

config = VllmConfig()
after_config = sorted(
    m for m in ("flag_gems", "vllm._custom_ops", "torch_npu", "vllm_fl.ops") if m in sys.modules
)

from vllm_fl import compat  # noqa: E402

ours = {k: v.__module__ for k, v in compat.oot_registry().items() if "vllm_fl" in v.__module__}
cuda_calls = list(CUDA_CALLS)  # before the question below, which builds the dispatch manager
resolved: list[str] = []
if "vllm_fl.dispatch" in sys.modules:
    # Asked after the module snapshots above: what any op selected, in this process.
    from vllm_fl.dispatch import used_impls

    resolved = sorted(used_impls())

print(
    "FRONT_END "
    + json.dumps(
        {
            "platform": platform,
            "imported_after_plugins": after_plugins,
            "imported_after_config": after_config,
            "cuda_calls": cuda_calls,
            "cuda_initialized": torch.cuda.is_initialized(),
            "registered_oot": ours,
            "resolved_ops": resolved,
            "worker_cls": config.parallel_config.worker_cls,
        }
    ),
    flush=True,
)

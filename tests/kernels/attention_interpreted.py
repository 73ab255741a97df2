"""vLLM's portable Triton attention kernels as the plugin calls them, in Triton's interpreter on
CPU tensors, against the reference (run as a script: the interpreter and vLLM's Triton must be
set up before vLLM's kernel modules are imported).

    python -m tests.kernels.attention_interpreted

vLLM's CPU build replaces Triton by placeholders when Triton has no CPU backend; with
TRITON_INTERPRET=1 the real Triton interprets ``@triton.jit`` kernels on CPU tensors, so this
script hands vLLM's kernel modules the real Triton before importing them. It runs every test case
ops.yaml declares for ``paged_attention`` through the flagos impl (vLLM's ``unified_attention``,
the decode scratch included) on the caches as vLLM 0.24 and 0.32 lay them out, and
``reshape_and_cache_flash`` through the flagos impl on 0.32's layout (views of [num_blocks,
kv_heads, block_size, 2 * head_size], which FlagGems' kernel does not address: vLLM's Triton
kernel writes them), and prints one line:
ATTENTION {"<op>/<case>/<dtype>/vllm-<layout>": "ok" or how it differs from the reference
beyond the op's tolerance in ops.yaml, ...}.
"""

from __future__ import annotations

import json
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
import vllm.triton_utils as vllm_triton  # noqa: E402

vllm_triton.triton, vllm_triton.tl, vllm_triton.HAS_TRITON = triton, tl, True
# vLLM's cache write sizes its tiles by the GPU's generation; an H100's
torch.cuda.get_device_capability = lambda device=None: (9, 0)

from tests.support.interpreted_cases import run_cases  # noqa: E402
from vllm_fl.backends.flaggems.impl import attention as flagos  # noqa: E402
from vllm_fl.backends.reference.impl import attention as reference  # noqa: E402

DTYPES = (torch.float32, torch.float16)


def vllm_0_24_layout(key_cache: torch.Tensor, value_cache: torch.Tensor) -> tuple:
    """The caches' values as vLLM 0.24 hands them: the two halves of one [num_blocks, 2,
    block_size, kv_heads, head_size] tensor."""
    combined = torch.stack([key_cache, value_cache], dim=1)
    return tuple(combined.unbind(1))


def vllm_0_32_layout(key_cache: torch.Tensor, value_cache: torch.Tensor) -> tuple:
    """The caches' values as vLLM 0.32 hands them: views of one [num_blocks, kv_heads,
    block_size, 2 * head_size] tensor, a head's values interleaved after its keys."""
    blocks, size, heads, dim = key_cache.shape
    combined = torch.cat([key_cache, value_cache], dim=-1).transpose(1, 2).contiguous()
    return tuple(combined.transpose(1, 2).split(dim, dim=-1))


LAYOUTS = {"0.24": vllm_0_24_layout, "0.32": vllm_0_32_layout}


def in_layout(version: str):
    """The input variant with the caches laid out as vLLM ``version`` hands them."""

    def variant(inputs: dict) -> dict:
        caches = LAYOUTS[version](inputs["key_cache"], inputs["value_cache"])
        return {**inputs, "key_cache": caches[0], "value_cache": caches[1]}

    return (f"/vllm-{version}", variant)


def run(name: str, layouts: tuple[str, ...]) -> dict[str, str]:
    """Every test case of op ``name`` in every dtype of DTYPES and layout (`run_cases`)."""
    variants = [in_layout(version) for version in layouts]
    impl, ref = getattr(flagos, name), getattr(reference, name)
    return run_cases(name, impl, ref, DTYPES, variants)


def main() -> int:
    results = run("paged_attention", ("0.24", "0.32"))
    # vLLM 0.24's layout is FlagGems' (not installed here); 0.32's goes to vLLM's kernel
    results.update(run("reshape_and_cache_flash", ("0.32",)))
    print("ATTENTION " + json.dumps(results), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The flagos MLA impls that run Triton kernels without FlagGems, in Triton's interpreter on CPU
tensors, against the reference (run as a script: the interpreter and vLLM's Triton must be set
up before vLLM's kernel modules are imported).

    python -m tests.kernels.mla_interpreted

vLLM's CPU build replaces Triton by placeholders when Triton has no CPU backend; with
TRITON_INTERPRET=1 the real Triton interprets ``@triton.jit`` kernels on CPU tensors, so this
script hands vLLM's kernel modules the real Triton before importing them. It runs every test case
ops.yaml declares for ``gather_and_maybe_dequant_cache`` (the kernel library's gather),
``merge_attn_states`` (vLLM's Triton merge, also on strided views as vLLM 0.32 passes them) and
``mla_decode_attention`` (vLLM's Triton decode) through the flagos impls, and prints one line:
MLA {"<op>/<case>/<dtype>": "ok" or how it differs from the reference beyond the op's tolerance
in ops.yaml, ...}. (FlagGems, which the cache write and the prefill run on, is not installed on
the CPU: the GPU parity tests check those.)
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

from tests.support.interpreted_cases import AS_GIVEN, run_cases  # noqa: E402
from vllm_fl.backends.flaggems.impl import mla as flagos  # noqa: E402
from vllm_fl.backends.reference.impl import mla as reference  # noqa: E402

#: the dtypes each op's kernels are checked in (the decode kernel is half precision only)
DTYPES = {
    "gather_and_maybe_dequant_cache": (torch.float32, torch.float16),
    "merge_attn_states": (torch.float32, torch.float16),
    "mla_decode_attention": (torch.float16,),
}


def _strided(inputs: dict) -> dict:
    """merge_attn_states' outputs and partial results as views of wider tensors, the
    log-sum-exps as transposes of [tokens, heads] tensors: layouts vLLM hands the merge."""
    out = dict(inputs)
    for name in ("output", "prefix_output", "suffix_output"):
        t = inputs[name]
        wide = torch.zeros(*t.shape[:-1], t.shape[-1] + 64, dtype=t.dtype)
        wide[..., : t.shape[-1]] = t
        out[name] = wide[..., : t.shape[-1]]
    for name in ("prefix_lse", "suffix_lse", "output_lse"):
        if inputs.get(name) is not None:
            out[name] = inputs[name].t().contiguous().t()
    return out


def main() -> int:
    results = {}
    for name, variants in (
        ("gather_and_maybe_dequant_cache", AS_GIVEN),
        ("merge_attn_states", (*AS_GIVEN, ("/strided", _strided))),
        ("mla_decode_attention", AS_GIVEN),
    ):
        impl, ref = getattr(flagos, name), getattr(reference, name)
        results.update(run_cases(name, impl, ref, DTYPES[name], variants))
    print("MLA " + json.dumps(results), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

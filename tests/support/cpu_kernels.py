"""Which of vLLM's CPU kernel libraries runs on this machine: vLLM's CPU build ships one per x86
ISA (``_C`` for AVX-512 with BF16, ``_C_AVX512``, ``_C_AVX2``) and loads the one the CPU supports,
by the test vLLM makes itself (``CpuPlatform.import_kernels``). The AVX2 library lacks kernels the
others have (``cpu_gemm_wna16``), so a comparison with vanilla vLLM that needs them cannot be made
on a CPU without AVX-512."""

from __future__ import annotations

import pytest
import torch

#: set on a CPU without AVX-512, where vLLM loads its AVX2 kernels
AVX2_ONLY = not torch.cpu._is_avx512_supported()


def needs_avx512_kernels(why: str):
    """Skip a test, saying ``why``, where vLLM runs its AVX2 kernel library."""
    return pytest.mark.skipif(
        AVX2_ONLY,
        reason=f"this CPU has no AVX-512, so vLLM's CPU build runs its AVX2 kernels: {why}",
    )

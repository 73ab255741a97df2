"""A kernel that loops to a bound given at run time, to probe Triton's interpreter with."""

import triton
import triton.language as tl


@triton.jit
def count_up(out_ptr, n):
    for i in range(0, n, 1):
        tl.store(out_ptr + i, i)

"""Bring-up mode: every kernel checked against the reference inside a real vLLM run.

With ``VLLM_FL_VERIFY`` on (or a list of ops), each dispatched call in the process that runs the
model also runs the op's reference impl on copies of its inputs and records how far the selected
impl's result is from it, per op x call site x shapes x dtype, against the op's parity-test
tolerance; the model keeps the selected impl's result. See ``docs/verify.md``.

- ``compare``: the distance of two results; ``record``: the rows of one process;
  ``report``: merging, ordering and printing them; ``sites``: call sites;
- ``verifier``: the verifying callable installed as each op's selection;
- ``process``: turning it on in a worker after warm-up, and the report at shutdown;
- ``bisect``: the ops whose selected impls change the greedy tokens;
- ``cli`` (``python -m vllm_fl.verify``): a short generation with verification on, and bisection.
"""

from .process import current, disable, enable

__all__ = ["enable", "disable", "current"]

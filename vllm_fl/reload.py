"""vLLM's in-place weight reload (``LLM.collective_rpc("reload_weights")``, the RL weight
updates) on a model whose weights the plugin's kernels derived values from.

vLLM writes the new values into the model's existing tensors (``param.data.copy_``: the same
tensors its CUDA graphs hold). Two things of the plugin's would not see them:

- a weight whose device storage a backend gave back (``vllm_fl.kernels.resident``: the cuda
  W4A16 impl, once Machete or Marlin holds it repacked) has no room to be written into;
- values derived from a weight and remembered while it lives (``TensorMemo``: a repacked
  weight, converted scales, Gemma's shifted norm weight) are kept while its version counter
  stands still, and writes through ``.data`` do not move it.

So :func:`reloading` gives every released weight its values back before vLLM writes, and moves
every parameter's and buffer's version counter after: the next call derives its values (and
repacks, and releases) again. While it runs a W4A16 model's weights are held twice, as before
the first forward.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from vllm_fl.kernels.resident import resident


@contextmanager
def reloading(model: torch.nn.Module) -> Iterator[None]:
    """Around vLLM's reload of ``model``'s weights (see the module)."""
    tensors = [*model.parameters(), *model.buffers()]
    for tensor in tensors:
        resident(tensor)
    try:
        yield
    finally:
        for tensor in tensors:
            if not tensor.is_inference():  # an inference tensor has no version counter
                torch.autograd.graph.increment_version(tensor)

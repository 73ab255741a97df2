"""``vllm_fl/distributed/collectives.py``: the collectives of ops.yaml as the methods of vLLM's
device communicator they replace.

``CollectivesFL`` has one method per op with ``collective:``, named and shaped like vLLM's
``DeviceCommunicatorBase`` method (the op's signature); each calls the impl the communicator
selected for the op when it was built (``vllm_fl.distributed.communicator.CommunicatorFL``), with
the communicator first. A reader of the file sees exactly what vLLM's call runs.
"""

from __future__ import annotations

from .. import model as m
from ..render import render_file

PATH = "vllm_fl/distributed/collectives.py"


def emit(manifest: m.Manifest) -> dict[str, str]:
    ops = [op for op in manifest.ops if op.collective is not None]
    return {PATH: render_file("collectives.py.j2", PATH, ops=ops)}

"""Collectives through the dispatch: the plugin's device communicator for vLLM.

vLLM builds one device communicator per process group (tensor, pipeline, expert, data
parallel) from the class its platform names (``get_device_communicator_cls``); the plugin's
platforms name ``communicator.CommunicatorFL`` (the CPU platform, and any platform without a
communicator of its own) or ``cuda.CudaCommunicatorFL`` (the CUDA platform, where vLLM's graph
capture needs a ``CudaCommunicator``).

- ``collectives`` (generated from ops.yaml): ``CollectivesFL``, one method per collective op,
  named and shaped like vLLM's ``DeviceCommunicatorBase`` method it replaces;
- ``communicator``: ``CommunicatorFL``, which selects each collective's implementation once when
  vLLM builds it, checks that every rank of the group selected the same ones, and runs the
  ``communicator_setup`` hook of each backend it selected;
- ``all2all``: ``All2AllFL``, the communicator's all2all manager for MoE expert parallelism
  (vLLM's all-gather/reduce-scatter one, over the dispatched collectives);
- ``cuda``: ``CudaCommunicatorFL``, the same on vLLM's CUDA communicator.
- ``single_process``: vLLM's tensor-parallel state for one process outside an engine (a model's
  structure for ``vllm-fl coverage``, layers for the parity tests).

Nothing here is imported by ``import vllm_fl``: vLLM imports the class by its path.
"""

"""Runtime: calling the selected implementation, cheaply, and falling back.

- ``trampoline``: which code an op's dispatch function runs (one frame over the impl): the
  op's generated trampoline (``vllm_fl.dispatch.trampolines``) or the generic one;
- ``binding``: one op's trampoline and what it calls (resolution, installation, fallback), and
  the table of an owner's bindings;
- ``failures``: the implementations excluded after they raised;
- ``manager``: ``OpManager``, candidates of an op from registry, policy and failures (cached);
- ``default_manager``: the process-wide manager, ``call_op`` and ``dispatch_method``.

Their state changes under ``vllm_fl.dispatch.sync.LOCK``.
"""

"""Workers of the plugin's platforms: vLLM's own, plus the plugin's step before the model is built.

A worker runs in the process that runs the model (vLLM's engine core, or one process per GPU),
after every general plugin of that process has loaded. Its `init_device` (device set, model not
built yet) calls `vllm_fl.registration.prepare_model_process`: register the generated layer
classes, apply the plugin's `custom_ops` default where the user left vLLM's, resolve every op.
That is why nothing of this happens in vLLM's front-end, which must stay free of CUDA so that vLLM
may fork.

- `vllm_fl.worker.gpu.WorkerFL` (`vllm_fl.platform.cuda.PlatformFL`): vLLM's GPU worker; vLLM's
  CustomOps the plugin does not replace run their CUDA path, as in vanilla vLLM
  (`vllm_fl.platform.route_unreplaced_ops_to_cuda`); after vLLM's own warm-up it
  also lets the selected MoE backend compile its kernel variants (`vllm_fl.moe.warm_up`).
- Both log the selections of the ops the built model uses (`log_model_ops`): the ops are
  resolved before the model exists, quietly.
- Both start bring-up mode after vLLM's warm-up where `VLLM_FL_VERIFY` asks for it, and report
  at shutdown (`vllm_fl.verify.process`).
- Both reload weights in place as vLLM does, with the plugin's released weights and derived
  values made to follow (`vllm_fl.reload.reloading`).
- `vllm_fl.worker.cpu.CPUWorkerFL` (`vllm_fl.platform.cpu.PlatformFLCpu`): vLLM's CPU worker with
  a null memory-pool context. vLLM's GPU worker, which the CPU worker extends, wraps weight
  loading and KV-cache allocation in `_maybe_get_memory_pool_context`, which returns a null
  context only for in-tree platforms it recognises (`is_cpu()`, CUDA without cumem, XPU without
  sleep mode); on an out-of-tree platform it would reach for the sleep-mode allocator, which does
  not exist on CPU.

Each class sits at the top of its own module, which vLLM imports by the path the platform sets
as `worker_cls`: a GPU process must never import vLLM's CPU worker, whose module replaces
`torch.cuda`'s streams and events with no-ops when imported (`vllm.v1.worker.cpu.shm`). This
package holds the steps both share and imports no vLLM module.
"""

from __future__ import annotations


def model_ops(model) -> set[str]:
    """The ops ``model`` reaches: those of its dispatched layers (`vllm_fl.coverage.census`),
    and, transitively, the ops the selected impls of those call through the dispatch (an
    experts impl's block alignment, a quantized kernel's activation quantiser)."""
    from vllm_fl.coverage.census import bound_ops, census
    from vllm_fl.dispatch import get_default_manager

    manager = get_default_manager()
    pending = [
        op for layer in census(model, with_code=False) if layer.dispatched for op in layer.ops
    ]
    ops: set[str] = set()
    while pending:
        op = pending.pop()
        if op in ops:
            continue
        ops.add(op)
        for impl in (manager.binding(op).used, manager.binding(op).used_traced):
            if impl is not None:
                pending.extend(bound_ops(getattr(impl.fn, "__module__", "")))
    return ops


def log_model_ops(model) -> None:
    """The start-up log's "Op 'x' using ..." lines, for the ops ``model`` uses only (the ops were
    resolved quietly before the model was built); every op's where the model cannot be read."""
    from vllm_fl.dispatch import get_default_manager, get_logger

    manager = get_default_manager()
    every = manager.registry.list_operators()
    try:
        ops = model_ops(model)
    except Exception:  # noqa: BLE001 - a log line must not stop the engine
        get_logger().warning("vllm_fl: the ops of this model could not be listed", exc_info=True)
        ops = set(every)
    manager.log_selections(ops)
    get_logger().info(
        "vllm_fl: the model uses %d of the %d ops of the manifest (the others are resolved, "
        "not logged: `vllm-fl explain` lists them)",
        len(ops & set(every)),
        len(every),
    )


def start_verification(worker) -> None:
    """Bring-up mode (`VLLM_FL_VERIFY`), after vLLM's warm-up: its dummy runs stay unverified."""
    from vllm_fl.dispatch import get_config

    if not get_config().verify:
        return
    from vllm_fl.verify import process

    process.start(worker.get_model(), worker.vllm_config)


def finish_verification() -> None:
    from vllm_fl.verify import process

    process.finish()


def reload_following(worker, reload, args, kwargs) -> None:
    """``reload(*args, **kwargs)`` (vLLM's own reload) with the plugin's released weights and
    derived values made to follow."""
    from vllm_fl.reload import reloading

    with reloading(worker.get_model()):
        reload(*args, **kwargs)

"""FlagGems backend (``flagos``): operators backed by ``flag_gems`` Triton kernels.

``flag_gems`` probes the GPU when imported, so the impl modules import it inside function
bodies only; this package imports on any machine.

Besides ``impl/``: ``launch`` (launch plans: FlagGems' compiled kernels launched directly, keyed
by input layout), ``memo`` (per-tensor constants), ``kernels`` (a ``pointwise_dynamic`` kernel
FlagGems lacks), ``moe_launch`` (FlagGems' staged MoE alignment through plans), and the backend's
own Triton kernels where FlagGems' launch shape is the cost: ``rotary_kernel``, ``norm_kernel``,
``routing_kernels``; ``experts`` runs FlagGems' fused-experts sequence through plans, with
the GEMM configs of ``tuned_configs`` (tables per device in ``tuned/``) where it has them.

``BACKEND`` declares the backend's hooks:

- ``prepare``: vLLM's compiled MoE library must be loaded before ``flag_gems`` (``load_order``);
- ``warm_up["fused_experts"]``: ``warm_up.warm_up_experts``, called by ``vllm_fl.moe.warm_up``
  before the engine serves;
- ``selection_listeners``: ``oplist.write_oplist`` keeps ``FLAGGEMS_ENABLE_OPLIST_PATH`` listing
  the ops the manager runs on FlagGems.
"""

from vllm_fl.dispatch import Backend

from . import load_order, oplist


def warm_up_experts(*args, **kwargs) -> int:
    """``warm_up.warm_up_experts`` (imported on first use: it needs a GPU build of Triton)."""
    from .warm_up import warm_up_experts as warm_up

    return warm_up(*args, **kwargs)


BACKEND = Backend(
    "flagos",
    prepare=load_order.load_vllm_moe_library,
    warm_up={"fused_experts": warm_up_experts},
    selection_listeners=(oplist.write_oplist,),
)

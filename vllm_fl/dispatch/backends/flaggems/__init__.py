"""FlagGems backend (``flagos``): operators backed by ``flag_gems`` Triton kernels.

``flag_gems`` probes the GPU when imported, so the impl modules import it inside function
bodies only; this package imports on any machine. Importing it subscribes ``oplist``, which keeps
``FLAGGEMS_ENABLE_OPLIST_PATH`` listing the ops the default manager runs on FlagGems.
"""

from vllm_fl.dispatch.default_manager import on_default_selection

from . import oplist

on_default_selection(oplist.write_oplist)

"""Another vLLM plugin, as a test sees it: its general-plugin hook registers its own out-of-tree
class for RotaryEmbedding, a layer the plugin also replaces (as vLLM's own test plugin does).
Installed for a run by a dist-info folder (see test_other_plugins.py)."""

from vllm.model_executor.custom_op import CustomOp
from vllm.model_executor.layers.rotary_embedding import RotaryEmbedding


class RotaryEmbeddingOther(RotaryEmbedding):
    def forward_oot(self, positions, query, key=None):
        return self.forward_native(positions, query, key)


def register() -> None:
    """`vllm.general_plugins` entry point `other`."""
    CustomOp.register_oot(_decorated_op_cls=RotaryEmbeddingOther, name="RotaryEmbedding")

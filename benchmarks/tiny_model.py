"""A tiny random Llama and a byte-level BPE tokenizer, built locally (nothing is downloaded).

`build_tiny_llama(path)` writes a Hugging Face model directory that vLLM loads with
`vllm.LLM(model=path)`: hidden 64, 2 layers, 2 heads of head_dim 32, vocabulary 384.
The weights come from a fixed seed and are scaled up so the logits are far from ties, which
makes greedy decoding a sharp comparison between two runs.
"""

from __future__ import annotations

import json
from pathlib import Path

VOCAB_SIZE = 384
HIDDEN_SIZE = 64
NUM_LAYERS = 2
NUM_HEADS = 2
NUM_KV_HEADS = 1
INTERMEDIATE_SIZE = 128
MAX_POSITIONS = 256
SEED = 1234

_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "vLLM serves large language models with paged attention.",
    "Operators dispatch between FlagGems, vendor kernels and a PyTorch reference.",
    "RMSNorm, SiluAndMul and RotaryEmbedding are replaced out of tree.",
    "A tiny random Llama is enough to prove that the plugin runs end to end.",
    "Hello world! 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ",
]

PROMPTS = [
    "The quick brown fox",
    "Operators dispatch between",
    "Hello world!",
    "A tiny random Llama",
]


def _train_tokenizer(path: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - 2,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 20, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(str(path))


def build_tiny_llama(path: str | Path, hidden_size: int = HIDDEN_SIZE) -> Path:
    """Write the tiny model and its tokenizer to `path` (created if missing); return it. Its
    head_dim is `hidden_size` / 2 (GPU attention kernels are safest with 64)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    return build_tiny_model(
        path,
        LlamaConfig,
        LlamaForCausalLM,
        hidden_size=hidden_size,
        intermediate_size=INTERMEDIATE_SIZE,
        num_hidden_layers=NUM_LAYERS,
        num_attention_heads=NUM_HEADS,
        num_key_value_heads=NUM_KV_HEADS,
        head_dim=hidden_size // NUM_HEADS,
    )


def build_tiny_model(path: str | Path, config_cls, model_cls, **config) -> Path:
    """A random model of `model_cls` (its config from `config` and the shared defaults: vocabulary,
    hidden size, positions, the tokenizer's special tokens), saved with the tokenizer to `path`.
    The weights come from a fixed seed, scaled up so that greedy decoding has no near-ties."""
    import torch

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    _train_tokenizer(path)
    vocab = json.loads((path / "tokenizer.json").read_text())["model"]["vocab"]
    defaults = dict(
        vocab_size=VOCAB_SIZE,
        hidden_size=HIDDEN_SIZE,
        max_position_embeddings=MAX_POSITIONS,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        bos_token_id=vocab["<s>"],
        eos_token_id=vocab["</s>"],
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    torch.manual_seed(SEED)
    model = model_cls(config_cls(**{**defaults, **config}))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.copy_(1.0 + 0.1 * torch.randn_like(param))
            else:
                param.normal_(0.0, 0.2)
    model.save_pretrained(str(path), safe_serialization=True)
    return path


def build_tiny_int8_llama(path: str | Path, hidden_size: int = 256) -> Path:
    """The tiny Llama as an INT8 W8A8 checkpoint (compressed-tensors, the layout of
    ``shapes.QUANTIZATIONS["int8-w8a8"]``): every projection's weights quantised symmetrically per
    output channel (``weight`` int8, ``weight_scale`` [N, 1])."""
    import torch
    from shapes import QUANTIZATIONS
    from safetensors.torch import load_file, save_file

    path = build_tiny_llama(path, hidden_size=hidden_size)
    weights = load_file(str(path / "model.safetensors"))
    quantised: dict[str, torch.Tensor] = {}
    for name, tensor in weights.items():
        if not name.endswith("proj.weight"):
            quantised[name] = tensor
            continue
        scale = tensor.abs().amax(dim=1, keepdim=True) / 127
        quantised[name] = torch.round(tensor / scale).clamp(-128, 127).to(torch.int8)
        quantised[name.removesuffix("weight") + "weight_scale"] = scale.float()
    save_file(quantised, str(path / "model.safetensors"))
    config = json.loads((path / "config.json").read_text())
    config["quantization_config"] = QUANTIZATIONS["int8-w8a8"]
    (path / "config.json").write_text(json.dumps(config, indent=2))
    return path


if __name__ == "__main__":
    import sys

    print(build_tiny_llama(sys.argv[1]))

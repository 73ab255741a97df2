"""Quantized checkpoint formats, and a float checkpoint quantised into one.

`QUANTIZATIONS` holds the ``quantization_config`` each format's checkpoints ship.
`quantize_checkpoint(src, dst, fmt)` quantises a Hugging Face checkpoint folder of a
Llama-architecture model (safetensors weights, one file or shards with their index) into a new
folder in format `fmt`, by round-to-nearest in the format's own checkpoint layout: each linear
projection's weight (``*proj.weight``) is replaced by the format's tensors; embeddings, norms and
``lm_head`` are copied byte for byte; ``config.json`` gets the format's ``quantization_config``
(with the group size); every other file (tokenizer, generation config) is copied. The formats
(`FORMATS`), for a weight [N, K]:

- ``int8-w8a8`` (compressed-tensors, as llm-compressor writes it): ``weight`` int8 and
  ``weight_scale`` [N, 1] float32, symmetric per output channel (``scale = max|w| / 127``);
  the activations are quantised per token while running. No group.
- ``w4a16-gptq``, ``w8a16-gptq`` (GPTQ, symmetric, no act-order): per group of G input channels,
  ``scale = max|w| / (2^(bits-1) - 1)`` stored in float16, ``qweight`` [K / p, N] int32 packed
  along K, ``scales`` [K / G, N] float16, ``qzeros`` [K / G, N / p] holding zero point - 1
  (GPTQ's format v1), ``g_idx`` [K]. G is one of -1 (one group over K), 32, 64, 128 (Marlin's
  group sizes, which vLLM's GPTQ method checks, and the plugin's kernel's); default 128.
- ``w4a16-awq`` (AutoAWQ's GEMM format): 4 bits with zero points per group of G input channels,
  ``qweight`` [K, N / 8] and ``qzeros`` [K / G, N / 8] int32 packed along N in AWQ's order,
  ``scales`` [K / G, N] float16; G as GPTQ's.
- ``fp8-block`` (DeepSeek-V3, Qwen3-FP8): float8_e4m3fn ``weight`` and ``weight_scale_inv``
  [ceil(N / B), ceil(K / B)] float32, one scale per B x B block (``weight_block_size`` [B, B]);
  the activations are quantised per token and group of B input channels while running.
  Default B = 128.

Each weight read back lies within half a quantisation step of the original: the rounding of the
format alone. GPTQ and AWQ quantise with float32 scales and store them in float16, as their
tools do, which adds the scale's float16 rounding times the weight's code.

A weight a format cannot hold in vLLM is refused, before anything is written, with a ValueError
naming the tensor, its shape and what is allowed: GPTQ and AWQ need whole groups along K and K, N
that pack into int32 words; FP8 blocks need K a multiple of B (vLLM quantises the activations in
groups of B and asserts whole groups), and a whole number of blocks along N in a projection that
vLLM fuses with the next one (q_proj and k_proj into qkv_proj, gate_proj into gate_up_proj), where
a partial block would straddle two projections (vLLM skips its own check there and mixes their
scales). Square blocks only: vLLM quantises the activations in groups of the block's first size
and the GEMMs read them in groups of its second.

The folder is written to a scratch folder next to `dst` and renamed when complete: an error or an
interrupt leaves no `dst` (a killed process may leave the hidden scratch folder).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

#: the projections a GPTQ checkpoint quantises, named: without the list vLLM 0.24 infers them from
#: the checkpoint's safetensors, and a dummy checkpoint (a config.json only) has none, so every
#: layer would stay unquantized
GPTQ_MODULES = [
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
]
#: Checkpoint formats a shape can be run in: the ``quantization_config`` a quantized checkpoint of
#: that format ships (with dummy weights vLLM creates the quantized parameters of the format).
QUANTIZATIONS: dict[str, dict] = {
    # Qwen3-FP8 and DeepSeek-V3: 128x128 weight blocks, activations per 1x128 group
    "fp8-block": {
        "quant_method": "fp8",
        "activation_scheme": "dynamic",
        "weight_block_size": [128, 128],
    },
    # per-tensor weights, dynamic activations
    "fp8-tensor": {"quant_method": "fp8", "activation_scheme": "dynamic"},
    # compressed-tensors INT8 W8A8: per-channel weights, dynamic per-token activations
    "int8-w8a8": {
        "quant_method": "compressed-tensors",
        "format": "int-quantized",
        "quantization_status": "compressed",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {
                    "num_bits": 8,
                    "type": "int",
                    "symmetric": True,
                    "strategy": "channel",
                    "dynamic": False,
                },
                "input_activations": {
                    "num_bits": 8,
                    "type": "int",
                    "symmetric": True,
                    "strategy": "token",
                    "dynamic": True,
                },
            }
        },
        "ignore": ["lm_head"],
    },
    # GPTQ 4-bit weights, groups of 128 (W4A16)
    "w4a16-gptq": {
        "quant_method": "gptq",
        "bits": 4,
        "group_size": 128,
        "desc_act": False,
        "sym": True,
        "modules_in_block_to_quantize": GPTQ_MODULES,
    },
    # GPTQ 8-bit weights, groups of 128 (W8A16)
    "w8a16-gptq": {
        "quant_method": "gptq",
        "bits": 8,
        "group_size": 128,
        "desc_act": False,
        "sym": True,
        "modules_in_block_to_quantize": GPTQ_MODULES,
    },
    # AWQ 4-bit weights with zero points, groups of 128 (W4A16, AutoAWQ's GEMM format)
    "w4a16-awq": {
        "quant_method": "awq",
        "bits": 4,
        "group_size": 128,
        "zero_point": True,
        "version": "gemm",
    },
}

#: AWQ's order of the 4-bit values in a word: nibble j holds output channel AWQ_PACK_ORDER[j] of
#: its 8 (vLLM undoes it with ``_REVERSE_AWQ_PACK_ORDER``)
AWQ_PACK_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
#: projections vLLM fuses with the one after them (q, k with v; gate with up): a partial FP8
#: block at their end would straddle two projections of the fused weight
FUSED_BEFORE_ANOTHER = ("q_proj", "k_proj", "gate_proj")
#: the weights `quantize_checkpoint` quantises by default: a linear projection's
PROJECTION_SUFFIX = "proj.weight"

Tensors = dict[str, "torch.Tensor"]


@dataclass(frozen=True)
class Format:
    """How one format stores a weight [N, K]: ``quantise(weight, group)`` gives the tensors that
    replace it (suffixes of the projection's prefix, e.g. ``qweight``), ``dequantise(tensors,
    group)`` the float32 weight they stand for, ``refuse(name, shape, group)`` why a weight
    cannot be held (None: it can), ``config(group)`` the ``quantization_config``."""

    name: str
    default_group: int | None
    groups: str  # the groups allowed, in words (for errors)
    check_group: Callable[[int | None], bool]
    refuse: Callable[[str, tuple[int, ...], int | None], str | None]
    quantise: Callable[[torch.Tensor, int | None], Tensors]
    dequantise: Callable[[Mapping[str, torch.Tensor], int | None], torch.Tensor]
    config: Callable[[int | None], dict]


def _not_2d(shape: tuple[int, ...]) -> str | None:
    return None if len(shape) == 2 else "a 2-D weight [N, K]"


# -- INT8 W8A8 ------------------------------------------------------------------------------------


def _int8_quantise(weight: torch.Tensor, group: int | None) -> Tensors:
    from vllm_fl.testing.quantize import int8_token

    quantised = int8_token(weight)  # per row of [N, K]: per output channel
    return {"weight": quantised.q, "weight_scale": quantised.scales}


def _int8_dequantise(tensors: Mapping[str, torch.Tensor], group: int | None) -> torch.Tensor:
    return tensors["weight"].float() * tensors["weight_scale"].float()


INT8_W8A8 = Format(
    name="int8-w8a8",
    default_group=None,
    groups="none (one scale per output channel)",
    check_group=lambda group: group is None,
    refuse=lambda name, shape, group: _not_2d(shape),
    quantise=_int8_quantise,
    dequantise=_int8_dequantise,
    config=lambda group: QUANTIZATIONS["int8-w8a8"],
)


# -- GPTQ and AWQ ---------------------------------------------------------------------------------


def _wna16_refuse(bits: int, packed_along_k: bool):
    def refuse(name: str, shape: tuple[int, ...], group: int | None) -> str | None:
        from vllm_fl.kernels import wna16 as packing

        if len(shape) != 2:
            return "a 2-D weight [N, K]"
        n, k = shape
        factor = packing.pack_factor(bits)
        size = k if group == -1 else group
        if size is None or k % size:
            return f"K a multiple of the group size {group}"
        if n % factor or (packed_along_k and k % factor):
            along = "K and N" if packed_along_k else "N"
            return f"{along} multiples of {factor} ({factor} values of {bits} bits in an int32)"
        return None

    return refuse


def _group_ok(group: int | None) -> bool:
    from vllm_fl.kernels.wna16 import GROUP_SIZES

    return group in GROUP_SIZES


def _gptq_quantise(bits: int):
    def quantise(weight: torch.Tensor, group: int | None) -> Tensors:
        import torch

        from vllm_fl.kernels import wna16 as packing

        assert group is not None
        n, k = weight.shape
        size = k if group == -1 else group
        qweight, scales, _ = packing.quantize(weight.t(), bits, group)
        # format v1: the zero point minus one (symmetric: vLLM's kernels assume 2^(bits-1))
        zeros = torch.full((k // size, n), packing.default_zero(bits) - 1, dtype=torch.int32)
        return {
            "qweight": packing.canonical_to_k_packed(qweight, bits),
            "scales": scales.to(torch.float16),
            "qzeros": packing.pack(zeros, bits, dim=1),
            "g_idx": torch.arange(k, dtype=torch.int32) // size,
        }

    return quantise


def _gptq_dequantise(bits: int):
    def dequantise(tensors: Mapping[str, torch.Tensor], group: int | None) -> torch.Tensor:
        from vllm_fl.kernels import wna16 as packing

        assert group is not None
        qweight = packing.k_packed_to_canonical(tensors["qweight"], bits)
        return packing.dequantize(qweight, tensors["scales"], bits, group).t()

    return dequantise


def _gptq(name: str) -> Format:
    bits = QUANTIZATIONS[name]["bits"]
    return Format(
        name=name,
        default_group=QUANTIZATIONS[name]["group_size"],
        groups="-1 (one group over K), 32, 64 or 128",
        check_group=_group_ok,
        refuse=_wna16_refuse(bits, packed_along_k=True),
        quantise=_gptq_quantise(bits),
        dequantise=_gptq_dequantise(bits),
        config=lambda group: {**QUANTIZATIONS[name], "group_size": group},
    )


def _awq_order(words: torch.Tensor, order: tuple[int, ...] | list[int]) -> torch.Tensor:
    """4-bit words [R, N / 8] with the values of each word permuted by ``order``."""
    from vllm_fl.kernels import wna16 as packing

    values = packing.unpack(words, 4, dim=1)
    permuted = values.reshape(values.shape[0], -1, 8)[:, :, list(order)]
    return packing.pack(permuted.reshape(values.shape), 4, dim=1)


#: AWQ's order undone: position j of a canonical word comes from nibble AWQ_UNPACK_ORDER[j]
AWQ_UNPACK_ORDER = tuple(AWQ_PACK_ORDER.index(j) for j in range(8))


def _awq_quantise(weight: torch.Tensor, group: int | None) -> Tensors:
    import torch

    from vllm_fl.kernels import wna16 as packing

    assert group is not None
    qweight, scales, qzeros = packing.quantize(weight.t(), 4, group, zero_points=True)
    assert qzeros is not None
    return {
        "qweight": _awq_order(qweight, AWQ_PACK_ORDER),
        "qzeros": _awq_order(qzeros, AWQ_PACK_ORDER),
        "scales": scales.to(torch.float16),
    }


def _awq_dequantise(tensors: Mapping[str, torch.Tensor], group: int | None) -> torch.Tensor:
    from vllm_fl.kernels import wna16 as packing

    assert group is not None
    qweight = _awq_order(tensors["qweight"], AWQ_UNPACK_ORDER)
    qzeros = _awq_order(tensors["qzeros"], AWQ_UNPACK_ORDER)
    return packing.dequantize(qweight, tensors["scales"], 4, group, qzeros).t()


W4A16_AWQ = Format(
    name="w4a16-awq",
    default_group=QUANTIZATIONS["w4a16-awq"]["group_size"],
    groups="-1 (one group over K), 32, 64 or 128",
    check_group=_group_ok,
    refuse=_wna16_refuse(4, packed_along_k=False),
    quantise=_awq_quantise,
    dequantise=_awq_dequantise,
    config=lambda group: {**QUANTIZATIONS["w4a16-awq"], "group_size": group},
)


# -- FP8 blocks -----------------------------------------------------------------------------------


def dequantise_fp8_blocks(quantised, scales, block: tuple[int, int] = (128, 128)):
    """The float32 weight [N, K] a block-quantized one stands for (scales [N / bn, K / bk])."""
    rows, cols = block
    n, k = quantised.shape
    full = scales.repeat_interleave(rows, dim=0).repeat_interleave(cols, dim=1)[:n, :k]
    return quantised.float() * full


def _fp8_refuse(name: str, shape: tuple[int, ...], group: int | None) -> str | None:
    assert group is not None
    if len(shape) != 2:
        return "a 2-D weight [N, K]"
    n, k = shape
    if k % group:
        return (
            f"K a multiple of the block size {group} (vLLM quantises activations in whole groups)"
        )
    projection = name.removesuffix(".weight").rpartition(".")[2]
    if projection in FUSED_BEFORE_ANOTHER and n % group:
        return (
            f"N a multiple of the block size {group}: vLLM fuses {projection} with the next "
            "projection, and a partial block would straddle the two"
        )
    return None


def _fp8_quantise(weight: torch.Tensor, group: int | None) -> Tensors:
    from vllm_fl.testing.quantize import fp8_block

    assert group is not None
    blocks = fp8_block(weight.float(), (group, group))
    return {"weight": blocks.q, "weight_scale_inv": blocks.scales}


def _fp8_dequantise(tensors: Mapping[str, torch.Tensor], group: int | None) -> torch.Tensor:
    assert group is not None
    return dequantise_fp8_blocks(tensors["weight"], tensors["weight_scale_inv"], (group, group))


FP8_BLOCK = Format(
    name="fp8-block",
    default_group=QUANTIZATIONS["fp8-block"]["weight_block_size"][0],
    groups="a positive block size B (square B x B blocks)",
    check_group=lambda group: isinstance(group, int) and group > 0,
    refuse=_fp8_refuse,
    quantise=_fp8_quantise,
    dequantise=_fp8_dequantise,
    config=lambda group: {**QUANTIZATIONS["fp8-block"], "weight_block_size": [group, group]},
)

#: format name -> how it stores a weight; the formats `quantize_checkpoint` writes
FORMATS: dict[str, Format] = {
    f.name: f for f in (INT8_W8A8, _gptq("w4a16-gptq"), _gptq("w8a16-gptq"), W4A16_AWQ, FP8_BLOCK)
}


# -- a checkpoint folder ---------------------------------------------------------------------------

INDEX = "model.safetensors.index.json"


def is_projection(name: str) -> bool:
    """Whether tensor `name` is a linear projection's weight (what the formats quantise)."""
    return name.endswith(PROJECTION_SUFFIX)


def format_of(fmt: str, group_size: int | None = None) -> tuple[Format, int | None]:
    """The format named `fmt` and the group it uses (`group_size`, else the format's default);
    ValueError for an unknown format or a group it does not take."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown checkpoint format {fmt!r}, expected one of {list(FORMATS)}")
    spec = FORMATS[fmt]
    group = spec.default_group if group_size is None else group_size
    if not spec.check_group(group):
        raise ValueError(f"{fmt}: group size {group}, expected {spec.groups}")
    return spec, group


def quantize_checkpoint(
    src: str | Path,
    dst: str | Path,
    fmt: str,
    group_size: int | None = None,
    select: Callable[[str], bool] = is_projection,
    dequantised: bool = False,
) -> Path:
    """Write checkpoint folder `src` quantised to format `fmt` (a key of `FORMATS`) into `dst`,
    which must not exist or be an empty folder (see the module docstring); returns `dst`.
    `group_size` is the format's group (GPTQ, AWQ) or block size (FP8), its default if None;
    `select` picks the tensors to quantise (by default the linear projections' weights). With
    `dequantised`, each selected weight is instead replaced by the float weight its quantised
    form stands for (in its own dtype) and the config gets no quantization_config: a float
    checkpoint that computes what the quantised one does, up to its activations' quantisation.
    ValueError for a weight the format cannot hold, before anything is written."""
    src, dst = Path(src), Path(dst)
    spec, group = format_of(fmt, group_size)
    if dst.exists() and (not dst.is_dir() or any(dst.iterdir())):
        raise FileExistsError(f"{dst} exists and is not an empty folder")
    config = json.loads((src / "config.json").read_text())
    if "quantization_config" in config:
        raise ValueError(f"{src} is quantized already ({config['quantization_config']})")
    weight_files = sorted(src.glob("*.safetensors"))
    if not weight_files:
        raise ValueError(f"{src} holds no *.safetensors weights")
    _check_shapes(spec, group, weight_files, select)

    dst.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=dst.parent, prefix=f".{dst.name}-"))
    try:
        out = scratch / "checkpoint"  # made by mkdir: the permissions of an ordinary folder
        out.mkdir()
        weight_map = {}
        for path in weight_files:
            names = _convert(spec, group, path, out / path.name, select, dequantised)
            weight_map.update(dict.fromkeys(names, path.name))
        for path in src.iterdir():
            # the weights are written above; dot files are the source's own (its cache mark)
            copied = path.suffix != ".safetensors" and path.name not in ("config.json", INDEX)
            if path.is_file() and copied and not path.name.startswith("."):
                shutil.copy2(path, out / path.name)
        if not dequantised:
            config["quantization_config"] = spec.config(group)
        (out / "config.json").write_text(json.dumps(config, indent=2))
        if (src / INDEX).exists():
            index = json.loads((src / INDEX).read_text())
            index["weight_map"] = dict(sorted(weight_map.items()))
            (out / INDEX).write_text(json.dumps(index, indent=2))
        if dst.exists():
            dst.rmdir()  # empty, checked above
        out.rename(dst)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return dst


def _check_shapes(
    spec: Format, group: int | None, files: list[Path], select: Callable[[str], bool]
) -> None:
    """ValueError for the first selected tensor the format cannot hold (shapes read from the
    files' headers, no tensor loaded)."""
    from safetensors import safe_open

    for path in files:
        with safe_open(str(path), framework="pt") as weights:
            for name in weights.keys():
                if not select(name):
                    continue
                shape = tuple(weights.get_slice(name).get_shape())
                why = spec.refuse(name, shape, group)
                if why is not None:
                    raise ValueError(
                        f"{spec.name} (group {group}) cannot hold {name} of shape {list(shape)}: "
                        f"it needs {why}"
                    )


def _convert(
    spec: Format,
    group: int | None,
    path: Path,
    out: Path,
    select: Callable[[str], bool],
    dequantised: bool,
) -> list[str]:
    """The weights of `path` with the selected ones quantised (or dequantised back), saved to
    `out`; the tensor names written."""
    from safetensors.torch import load_file, save_file

    converted = {}
    for name, tensor in load_file(str(path)).items():
        if not select(name):
            converted[name] = tensor
            continue
        tensors = spec.quantise(tensor, group)
        if dequantised:
            converted[name] = spec.dequantise(tensors, group).to(tensor.dtype).contiguous()
            continue
        prefix = name.removesuffix("weight")
        converted.update({prefix + suffix: value for suffix, value in tensors.items()})
    save_file(converted, str(out), metadata={"format": "pt"})
    return list(converted)

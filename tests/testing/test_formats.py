"""`vllm_fl.testing.formats.quantize_checkpoint` on a tiny random Llama folder, read back with
each format's layout written out here: the dequantised weights within half a quantisation step
of the originals, the format's quantization_config, everything else byte-equal; a weight the
format cannot hold refused by name before anything is written; an interrupted write leaving no
folder; shards; the cached form in `vllm_fl.testing.checkpoint`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from vllm_fl.kernels import wna16 as packing
from vllm_fl.testing import checkpoint, formats
from vllm_fl.testing.formats import AWQ_PACK_ORDER, QUANTIZATIONS, quantize_checkpoint
from vllm_fl.testing.models import build_tiny_llama

FORMATS = ["int8-w8a8", "w4a16-gptq", "w8a16-gptq", "w4a16-awq", "fp8-block"]
#: the tensors that replace a projection's weight, per format
SUFFIXES = {
    "int8-w8a8": {"weight", "weight_scale"},
    "w4a16-gptq": {"qweight", "scales", "qzeros", "g_idx"},
    "w8a16-gptq": {"qweight", "scales", "qzeros", "g_idx"},
    "w4a16-awq": {"qweight", "scales", "qzeros"},
    "fp8-block": {"weight", "weight_scale_inv"},
}
#: float32 arithmetic around the rounding (x * (127 / amax) against x / scale, and the like)
SLACK = 1 + 1e-5
#: the largest relative rounding of a float16 (10 fraction bits), GPTQ's and AWQ's stored scales
FP16_ROUNDING = 2.0**-11


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """The tiny Llama, hidden 256 (K of 256 and 128, N of 256, 128 and 128: every format's
    default group fits)."""
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-float") / "model", hidden_size=256)


def _expand(scales: torch.Tensor, rows: int, cols: int, shape: torch.Size) -> torch.Tensor:
    return scales.repeat_interleave(rows, 0).repeat_interleave(cols, 1)[: shape[0], : shape[1]]


def _read_back(fmt: str, t: dict[str, torch.Tensor], group: int | None, shape: torch.Size):
    """(the weight [N, K] the format's tensors stand for, the format's rounding per element: half
    a quantisation step), from each layout as vLLM reads it."""
    n, k = shape
    if fmt == "int8-w8a8":
        assert t["weight"].dtype == torch.int8 and t["weight_scale"].shape == (n, 1)
        scale = t["weight_scale"].float().expand(n, k)
        return t["weight"].float() * scale, scale / 2
    if fmt == "fp8-block":
        assert t["weight"].dtype == torch.float8_e4m3fn
        scale = _expand(t["weight_scale_inv"].float(), group, group, shape)
        # e4m3: 3 mantissa bits, so values in [2^e, 2^(e+1)) are 2^(e-3) apart; below 2^-6
        # (subnormal) 2^-9 apart
        scaled = t["weight"].float().abs().clamp(min=2.0**-6)
        return t["weight"].float() * scale, scale * 2.0 ** (torch.floor(torch.log2(scaled)) - 4)
    size = k if group == -1 else group
    assert t["scales"].dtype == torch.float16 and t["scales"].shape == (k // size, n)
    scale = t["scales"].float().repeat_interleave(size, 0)  # [K, N]
    if fmt == "w4a16-awq":
        # qweight [K, N / 8] packed along N, nibble j holding channel AWQ_PACK_ORDER[j] of 8
        def unpack(words: torch.Tensor) -> torch.Tensor:
            nibbles = packing.unpack(words, 4, dim=1).reshape(words.shape[0], -1, 8)
            values = torch.empty_like(nibbles)
            values[:, :, list(AWQ_PACK_ORDER)] = nibbles
            return values.reshape(words.shape[0], -1)

        q, zeros = unpack(t["qweight"]), unpack(t["qzeros"]).repeat_interleave(size, 0)
    else:
        # qweight [K / p, N] packed along K; qzeros hold the zero point - 1 (format v1)
        bits = QUANTIZATIONS[fmt]["bits"]
        assert torch.equal(t["g_idx"], torch.arange(k, dtype=torch.int32) // size)
        q = packing.unpack(t["qweight"], bits, dim=0)
        zeros = packing.unpack(t["qzeros"], bits, dim=1)[t["g_idx"].long()] + 1
        assert (zeros == 2 ** (bits - 1)).all()  # symmetric
    codes = (q - zeros).float()
    # quantised with the float32 scale s, stored as float16 s16 = s (1 + e), |e| <= 2^-11: half a
    # step of s, plus the code times the scale's rounding
    bound = scale * (1 + FP16_ROUNDING) / 2 + codes.abs() * scale * FP16_ROUNDING
    return (codes * scale).t(), bound.t()


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_weight_reads_back_within_half_a_step_and_the_rest_is_untouched(tiny, tmp_path, fmt):
    out = quantize_checkpoint(tiny, tmp_path / "q", fmt)
    group = formats.FORMATS[fmt].default_group
    config = json.loads((out / "config.json").read_text())
    assert config.pop("quantization_config") == QUANTIZATIONS[fmt]
    assert config == json.loads((tiny / "config.json").read_text())
    original, written = load_file(str(tiny / "model.safetensors")), load_file(
        str(out / "model.safetensors")
    )
    projections = [name for name in original if name.endswith("proj.weight")]
    assert len(projections) == 14  # 7 in each of 2 layers
    for name in projections:
        prefix = name.removesuffix("weight")
        mine = {key.removeprefix(prefix): value for key, value in written.items()}
        tensors = {suffix: mine[suffix] for suffix in SUFFIXES[fmt]}
        weight, half_step = _read_back(fmt, tensors, group, original[name].shape)
        error = (weight - original[name]).abs()
        assert (error <= half_step * SLACK).all(), (name, (error - half_step).max())
        assert error.max() > 0, name  # it was quantised
    kept = [name for name in original if name not in projections]
    assert kept and set(written) == set(kept) | {
        name.removesuffix("weight") + suffix for name in projections for suffix in SUFFIXES[fmt]
    }
    for name in kept:  # embeddings, norms, lm_head
        assert written[name].dtype == original[name].dtype, name
        assert written[name].numpy().tobytes() == original[name].numpy().tobytes(), name
    for path in tiny.iterdir():
        if path.name not in ("config.json", "model.safetensors"):
            assert (out / path.name).read_bytes() == path.read_bytes(), path.name


@pytest.mark.parametrize(
    ("fmt", "key", "value", "scale", "shape"),
    [
        ("w4a16-gptq", "group_size", 64, "scales", [4, 256]),
        ("w4a16-gptq", "group_size", -1, "scales", [1, 256]),
        ("fp8-block", "weight_block_size", [64, 64], "weight_scale_inv", [4, 4]),
    ],
)
def test_the_group_size_is_a_parameter(tiny, tmp_path, fmt, key, value, scale, shape):
    group = value[0] if isinstance(value, list) else value
    out = quantize_checkpoint(tiny, tmp_path / "q", fmt, group_size=group)
    assert json.loads((out / "config.json").read_text())["quantization_config"][key] == value
    written = load_file(str(out / "model.safetensors"))
    assert list(written["model.layers.0.self_attn.q_proj." + scale].shape) == shape


def _folder(path: Path, shapes: dict[str, tuple[int, ...]]) -> Path:
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    save_file(
        {name: torch.randn(shape) for name, shape in shapes.items()}, str(path / "m.safetensors")
    )
    return path


@pytest.mark.parametrize(
    ("fmt", "group", "shapes", "message"),
    [
        (
            "w4a16-gptq",
            128,
            {"model.layers.0.self_attn.q_proj.weight": (64, 576)},
            r"w4a16-gptq \(group 128\) cannot hold model.layers.0.self_attn.q_proj.weight of "
            r"shape \[64, 576\]: it needs K a multiple of the group size 128",
        ),
        (
            "w4a16-gptq",
            64,
            {"model.layers.0.mlp.down_proj.weight": (100, 64)},
            r"down_proj.weight of shape \[100, 64\]: it needs K and N multiples of 8",
        ),
        (
            "fp8-block",
            128,
            {"model.layers.0.mlp.down_proj.weight": (128, 576)},
            r"shape \[128, 576\]: it needs K a multiple of the block size 128",
        ),
        (
            "fp8-block",
            64,
            {"model.layers.0.self_attn.q_proj.weight": (96, 128)},
            r"q_proj.weight of shape \[96, 128\]: it needs N a multiple of the block size 64: "
            r"vLLM fuses q_proj with the next projection",
        ),
        (
            "int8-w8a8",
            None,
            {"model.layers.0.mlp.x_proj.weight": (2, 4, 8)},
            r"x_proj.weight of shape \[2, 4, 8\]: it needs a 2-D weight",
        ),
    ],
)
def test_a_shape_the_format_cannot_hold_is_refused_before_anything_is_written(
    tmp_path, fmt, group, shapes, message
):
    src = _folder(tmp_path / "src", shapes)
    with pytest.raises(ValueError, match=message):
        quantize_checkpoint(src, tmp_path / "q", fmt, group_size=group)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def test_a_partial_block_is_allowed_at_the_end_of_a_projection_vllm_does_not_fuse_on(tmp_path):
    src = _folder(tmp_path / "src", {"model.layers.0.self_attn.v_proj.weight": (96, 128)})
    out = quantize_checkpoint(src, tmp_path / "q", "fp8-block", group_size=64)
    written = load_file(str(out / "m.safetensors"))
    assert written["model.layers.0.self_attn.v_proj.weight_scale_inv"].shape == (2, 2)


@pytest.mark.parametrize(
    ("fmt", "group", "message"),
    [
        ("int8-w8a8", 64, "int8-w8a8: group size 64, expected none"),
        ("w4a16-gptq", 48, r"group size 48, expected -1 \(one group over K\), 32, 64 or 128"),
        ("fp8-block", 0, "group size 0, expected a positive block size"),
        ("nf4", None, "unknown checkpoint format 'nf4'"),
    ],
)
def test_a_group_or_format_it_does_not_take_is_refused(tiny, tmp_path, fmt, group, message):
    with pytest.raises(ValueError, match=message):
        quantize_checkpoint(tiny, tmp_path / "q", fmt, group_size=group)
    assert list(tmp_path.iterdir()) == []


def test_an_interrupted_write_leaves_no_folder(tiny, tmp_path, monkeypatch):
    spec = formats.FORMATS["int8-w8a8"]
    calls = []

    def interrupted(weight, group):
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return spec.quantise(weight, group)

    monkeypatch.setitem(
        formats.FORMATS, "int8-w8a8", dataclasses.replace(spec, quantise=interrupted)
    )
    with pytest.raises(KeyboardInterrupt):
        quantize_checkpoint(tiny, tmp_path / "q", "int8-w8a8")
    assert list(tmp_path.iterdir()) == []  # neither the folder nor its scratch


def test_the_destination_may_be_an_empty_folder_and_nothing_else(tiny, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert quantize_checkpoint(tiny, empty, "int8-w8a8") == empty
    assert (empty / "model.safetensors").exists()
    with pytest.raises(FileExistsError, match="not an empty folder"):
        quantize_checkpoint(tiny, empty, "int8-w8a8")
    with pytest.raises(ValueError, match="quantized already"):
        quantize_checkpoint(empty, tmp_path / "again", "int8-w8a8")


def test_shards_are_quantised_file_by_file_and_the_index_follows(tiny, tmp_path):
    src = tmp_path / "sharded"
    src.mkdir()
    weights = load_file(str(tiny / "model.safetensors"))
    shards = {"model-00001-of-00002.safetensors": {}, "model-00002-of-00002.safetensors": {}}
    for name, tensor in weights.items():
        shards[list(shards)[".layers.1." in name]][name] = tensor
    for file, tensors in shards.items():
        save_file(tensors, str(src / file))
    index = {name: file for file, tensors in shards.items() for name in tensors}
    (src / formats.INDEX).write_text(json.dumps({"metadata": {}, "weight_map": index}))
    (src / "config.json").write_bytes((tiny / "config.json").read_bytes())

    out = quantize_checkpoint(src, tmp_path / "q", "fp8-block")
    weight_map = json.loads((out / formats.INDEX).read_text())["weight_map"]
    for file in shards:
        written = load_file(str(out / file))
        assert {name for name, f in weight_map.items() if f == file} == set(written)
    assert weight_map["model.layers.1.mlp.up_proj.weight_scale_inv"].startswith("model-00002")


def test_the_dequantised_twin_holds_what_the_quantised_weights_stand_for(tiny, tmp_path):
    quantised = quantize_checkpoint(tiny, tmp_path / "q", "fp8-block")
    twin = quantize_checkpoint(tiny, tmp_path / "twin", "fp8-block", dequantised=True)
    assert "quantization_config" not in json.loads((twin / "config.json").read_text())
    q, d = load_file(str(quantised / "model.safetensors")), load_file(
        str(twin / "model.safetensors")
    )
    assert set(d) == set(load_file(str(tiny / "model.safetensors")))
    name = "model.layers.0.mlp.gate_proj."
    shape = d[name + "weight"].shape
    tensors = {"weight": q[name + "weight"], "weight_scale_inv": q[name + "weight_scale_inv"]}
    expected, _ = _read_back("fp8-block", tensors, 128, shape)
    assert d[name + "weight"].dtype == torch.float32 and torch.equal(d[name + "weight"], expected)


def test_the_cached_quantised_checkpoint_is_made_once(tiny, tmp_path, monkeypatch, capsys):
    folder = checkpoint.quantized_checkpoint("w4a16-gptq", tmp_path, source=tiny)
    assert folder == tmp_path / f"{tiny.name}-w4a16-gptq-g64"  # QUANT_GROUPS' group
    assert (folder / checkpoint.COMPLETE_MARK).exists()
    config = json.loads((folder / "config.json").read_text())
    assert config["quantization_config"]["group_size"] == 64
    monkeypatch.setattr(checkpoint, "quantize_checkpoint", pytest.fail)
    assert checkpoint.quantized_checkpoint("w4a16-gptq", tmp_path, source=tiny) == folder
    assert sorted(p.name for p in tmp_path.iterdir()) == [folder.name]

    monkeypatch.setattr(checkpoint, "real_checkpoint", lambda cache_dir: tiny)
    assert checkpoint.main(["--quant", "w4a16-gptq", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == str(folder)

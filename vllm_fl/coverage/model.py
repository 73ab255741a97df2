"""Build a model's structure without its weights: vLLM's class for the checkpoint's architecture,
instantiated on the meta device under the plugin's platform, in this process.

Nothing is loaded or computed: parameters are meta tensors, so a 70B config costs what a tiny one
does. The plugin's classes are registered first (`vllm_fl.registration.prepare_model_process`, as
the plugin's worker does), so the layers vLLM builds are the ones a served model would have.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    import torch


class CoverageError(Exception):
    """A model the command cannot build; its message is the one line the user sees."""


@dataclass
class BuiltModel:
    """The model vLLM built (meta tensors), its architecture and the platform it was built on."""

    model: "torch.nn.Module"
    architecture: str
    platform: str
    vllm_config: Any


def _read_config(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise CoverageError(f"{path}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise CoverageError(f"{path}: not a JSON config: {exc.msg} (line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise CoverageError(f"{path}: not a Hugging Face config (a JSON object)")
    return data


@contextmanager
def model_folder(model: str | os.PathLike[str]) -> Iterator[tuple[Path, dict[str, Any]]]:
    """(a folder vLLM can read the config from, the config) for a checkpoint folder, a folder
    holding only ``config.json``, or a config file of any name (copied into a temporary folder
    as ``config.json``, since vLLM reads configs from folders)."""
    path = Path(model)
    if not path.exists():
        raise CoverageError(f"{path}: no such file or directory")
    if path.is_dir():
        config = path / "config.json"
        if not config.is_file():
            raise CoverageError(f"{path}: no config.json in this directory")
        yield path, _read_config(config)
        return
    data = _read_config(path)
    folder = Path(tempfile.mkdtemp(prefix="vllm-fl-coverage-"))
    try:
        shutil.copyfile(path, folder / "config.json")
        yield folder, data
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def use_plugin_platform() -> str:
    """Make the plugin's platform vLLM's for this process, before vLLM resolves it: the one
    ``VLLM_FL_PLATFORM`` names, else the one the plugin would pick here (``cuda`` where an NVIDIA
    GPU is visible), else the CPU host mode. Returns the platform's name."""
    from vllm_fl import PLATFORM_CLASSES, register_platform

    chosen = register_platform()
    if chosen is None:
        os.environ["VLLM_FL_PLATFORM"] = "cpu"
        chosen = register_platform()
    if chosen is None:  # VLLM_FL_PREFER_ENABLED=false, or an invalid VLLM_FL_PLATFORM
        raise CoverageError(
            "the plugin's platform is off (VLLM_FL_PREFER_ENABLED=false or an invalid "
            "VLLM_FL_PLATFORM): nothing would be dispatched"
        )
    return next(name for name, target in PLATFORM_CLASSES.items() if target == chosen)


def _check_architecture(config: dict[str, Any], where: Path) -> str:
    from vllm import ModelRegistry

    archs = config.get("architectures") or []
    if not archs:
        raise CoverageError(f"{where}: the config names no architecture ('architectures')")
    supported = set(ModelRegistry.get_supported_archs())
    known = [arch for arch in archs if arch in supported]
    if not known:
        import vllm

        raise CoverageError(
            f"{where}: architecture {', '.join(map(repr, archs))} is not one vLLM "
            f"{vllm.__version__} implements"
        )
    return known[0]


def build_model(model: str | os.PathLike[str]) -> BuiltModel:
    """vLLM's model for the config at ``model``, on the meta device, with the plugin's classes
    registered over vLLM's. Raises `CoverageError` (one line) for a path or config it cannot
    use."""
    platform = use_plugin_platform()
    with model_folder(model) as (folder, config):
        architecture = _check_architecture(config, Path(model))
        import torch
        from vllm.config import set_current_vllm_config
        from vllm.engine.arg_utils import EngineArgs
        from vllm.model_executor.model_loader.utils import initialize_model

        from vllm_fl.distributed.single_process import init_single_process
        from vllm_fl.registration import prepare_model_process

        try:
            vllm_config = EngineArgs(
                model=str(folder), skip_tokenizer_init=True, load_format="dummy"
            ).create_engine_config()
        except Exception as exc:  # noqa: BLE001 - vLLM's config errors become the one line
            first = str(exc).strip().splitlines()
            raise CoverageError(
                f"{model}: vLLM cannot configure this model: "
                f"{first[0] if first else type(exc).__name__}"
            ) from None
        with set_current_vllm_config(vllm_config):
            prepare_model_process(vllm_config)
            init_single_process()
            with torch.device("meta"):
                built = initialize_model(vllm_config=vllm_config)
    return BuiltModel(built, architecture, platform, vllm_config)

"""vLLM out-of-tree plugin: operators dispatched between FlagGems, vendor kernels and a PyTorch reference.

Two entry points, declared in pyproject.toml; importing this package imports neither vLLM nor
torch (vLLM imports it while it is still resolving its platform).

- `register_platform()` (`vllm.platform_plugins`) picks the platform:

  ========================  =============================================================
  VLLM_FL_PLATFORM          platform
  ========================  =============================================================
  unset / ``auto``          ``vllm_fl.platform.cuda.PlatformFL`` if an NVIDIA GPU is
                            visible, else None (vLLM keeps its own platform)
  ``cuda``                  ``vllm_fl.platform.cuda.PlatformFL``
  ``cpu``                   ``vllm_fl.platform.cpu.PlatformFLCpu``: the CPU host mode, real
                            vLLM (its CPU build) running our dispatch
  ``ascend`` (or any other  None: no platform of ours; the name still selects the
  known dispatch platform)  dispatch's platform configuration
  ========================  =============================================================

  The CPU host mode is opt-in, never automatic: it replaces vLLM's CPU kernels with the
  reference backend and makes `is_cpu()` False, which is right for testing the plugin and
  wrong for someone who just serves on CPU with the plugin installed.
  `VLLM_FL_PREFER_ENABLED=false` turns the plugin off: no platform, no replaced layers.

- `register()` (`vllm.general_plugins`, runs in every vLLM process that loads plugins, the
  front-end included): on the plugin's own platforms it does nothing, because their workers
  register the generated layer classes and resolve every op in the process that builds the model
  (`vllm_fl.worker`, `vllm_fl.registration.prepare_model_process`), so the front-end never
  imports a kernel library or touches CUDA. On another out-of-tree platform, whose workers are
  not ours, it registers the classes and resolves the ops itself. On an in-tree platform vLLM
  never calls `forward_oot`, so it registers nothing and says so once.
"""

from __future__ import annotations

import logging

__all__ = ["register", "register_platform"]

logger = logging.getLogger("vllm_fl.vllm")

PLATFORM_CLASSES = {
    "cuda": "vllm_fl.platform.cuda.PlatformFL",
    "cpu": "vllm_fl.platform.cpu.PlatformFLCpu",
}
# Platforms the dispatch configuration knows that have no vLLM platform of ours.
_FOREIGN_PLATFORMS = ("ascend",)
_skip_logged = False


def _plugin_enabled() -> bool:
    from vllm_fl.dispatch import read_env  # the dispatch's parser; no torch, no vLLM

    return read_env("VLLM_FL_PREFER_ENABLED")


def register_platform() -> str | None:
    """`vllm.platform_plugins` entry point: the platform class path, or None."""
    from vllm_fl.dispatch import ConfigError, read_env

    try:
        if not _plugin_enabled():
            return None
        requested = read_env("VLLM_FL_PLATFORM") or "auto"
    except ConfigError as exc:
        # vLLM swallows exceptions raised here (it logs them at DEBUG), so say it loudly.
        logger.error("vllm_fl: %s; the plugin's platform stays off", exc)
        return None
    if requested in PLATFORM_CLASSES:
        return PLATFORM_CLASSES[requested]
    if requested in _FOREIGN_PLATFORMS:
        return None
    if requested != "auto":
        # vLLM swallows exceptions raised here (it logs them at DEBUG), so say it loudly.
        logger.error(
            "vllm_fl: VLLM_FL_PLATFORM=%r is not one of %s; the plugin's platform stays off",
            requested,
            ["auto", *PLATFORM_CLASSES, *_FOREIGN_PLATFORMS],
        )
        return None
    from vllm_fl import compat

    if not compat.is_cpu_build() and compat.cuda_device_present():
        return PLATFORM_CLASSES["cuda"]
    return None


def register() -> None:
    """`vllm.general_plugins` entry point; idempotent. See the module docstring."""
    global _skip_logged
    from vllm.platforms import current_platform

    if not current_platform.is_out_of_tree():
        if not _skip_logged:
            _skip_logged = True
            _log_in_tree(current_platform)
        return
    from vllm_fl.platform import is_plugin_platform

    if is_plugin_platform(current_platform):
        return  # our workers do it where the model is built
    from vllm_fl.registration import prepare_model_process

    prepare_model_process()


def _log_in_tree(platform) -> None:
    """Say once, at INFO, that the plugin replaces nothing on vLLM's in-tree `platform`, and what
    would change that. vLLM's logging configures only its `vllm` logger, so the integration's
    logger gets its own handler first (`registration.configure_logging`), at the level of
    VLLM_FL_LOG_LEVEL read alone: the whole dispatch configuration would detect the platform,
    which asks torch.cuda, and the front-end must not touch CUDA."""
    from vllm_fl.dispatch import ConfigError, read_env
    from vllm_fl.registration import configure_logging

    try:
        level = read_env("VLLM_FL_LOG_LEVEL") or logging.INFO  # DEBUG's default shows INFO too
        enabled = _plugin_enabled()
    except ConfigError:  # an invalid setting is reported where the dispatch reads it
        level, enabled = logging.INFO, True
    configure_logging(level)
    if not enabled:
        hint = "the plugin is switched off (VLLM_FL_PREFER_ENABLED)"
    elif platform.is_cpu():
        hint = (
            "set VLLM_FL_PLATFORM=cpu to run it on vLLM's CPU build, with vLLM's CPU kernels "
            "replaced by its reference backend (for developing and testing the plugin)"
        )
    else:
        hint = (
            "its platforms are cuda (VLLM_FL_PLATFORM=cuda, or unset with vLLM's CUDA build and "
            "an NVIDIA GPU) and cpu (VLLM_FL_PLATFORM=cpu)"
        )
    logger.info(
        "vllm_fl: vLLM runs on its in-tree platform %s, where it never calls forward_oot: the "
        "plugin replaces no layers; %s",
        type(platform).__name__,
        hint,
    )

"""The front-end's check of the collectives' settings, before vLLM starts any worker."""

from __future__ import annotations

from vllm_fl.dispatch import ConfigError, get_config

__all__ = ["check_flagcx"]


def check_flagcx(world_size: int) -> None:
    """With ``FLAGCX_PATH`` set and more than one rank, load the FlagCX library now and raise
    ``ConfigError`` naming the path and what is missing if it cannot: in the front-end process,
    once, rather than as a crash of every worker when the first communicator is built."""
    if world_size < 2 or get_config().flagcx_path is None:
        return
    from vllm_fl.backends.flagcx import load_library
    from vllm_fl.backends.flagcx.library import FlagcxUnavailable

    try:
        load_library()
    except FlagcxUnavailable as exc:
        raise ConfigError(f"FLAGCX_PATH: {exc}") from None

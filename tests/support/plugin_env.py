"""Plugin distributions for a vLLM subprocess: this checkout's plugin as if installed, or another
plugin that vLLM finds by its entry points."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def write_dist_info(
    folder: Path, name: str, version: str, entry_points: dict[str, dict[str, str]]
) -> Path:
    """A distribution `name` with `entry_points` (group -> name -> target), as pip would record
    it, in `folder`: on a subprocess's PYTHONPATH, vLLM finds its plugins. Returns `folder`."""
    info = folder / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    groups = [
        f"[{group}]\n" + "".join(f"{key} = {target}\n" for key, target in entries.items())
        for group, entries in entry_points.items()
    ]
    (info / "entry_points.txt").write_text("\n".join(groups))
    return folder


def checkout_plugin_env(folder: Path) -> dict[str, str]:
    """PYTHONPATH for a vLLM subprocess that finds this checkout's plugin as if it were installed,
    also where it is not (a GPU machine whose Python has vLLM but not this project): the
    checkout, and a dist-info in `folder` with pyproject.toml's entry points, ahead of any other
    installed copy of the plugin."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    write_dist_info(folder, project["name"], project["version"], project["entry-points"])
    path = [str(folder), str(REPO), os.environ.get("PYTHONPATH", "")]
    return {"PYTHONPATH": os.pathsep.join(p for p in path if p)}

"""Where the generator finds its templates and the plugin's manifest.

In the repository they are the top-level ``templates/`` and ``ops.yaml`` next to ``codegen/``.
Installed, the generator is the package ``vllm_fl._codegen`` and the wheel carries both inside
it (``vllm_fl/_codegen/templates``, ``vllm_fl/_codegen/ops.yaml``, copied by ``setup.py``), so
that no generic top-level name lands in site-packages.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent


def _first(name: str) -> Path:
    """``name`` inside the installed generator package, else next to the checkout's."""
    inside = HERE / name
    return inside if inside.exists() else HERE.parent / name


#: the Jinja2 templates, one per generated artifact
TEMPLATES = _first("templates")
#: the plugin's manifest: the ops, their signatures, reference impls and tests
PROJECT_MANIFEST = _first("ops.yaml")
#: the plugin's checkout this generator runs from; None when installed from the wheel
CHECKOUT = None if (HERE / "ops.yaml").exists() else HERE.parent

"""The wheel ships the generator inside the plugin, as ``vllm_fl._codegen``.

The repository keeps the generator at the top level (``codegen/``, ``templates/``, ``ops.yaml``);
a wheel must not install a package named ``codegen`` into site-packages, so the package is
mapped under ``vllm_fl`` and its templates and the plugin's manifest are copied into it
(``codegen/resources.py`` finds them either way). Everything else is in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import find_namespace_packages, find_packages, setup
from setuptools.command.build_py import build_py

GENERATOR = "vllm_fl._codegen"
HERE = Path(__file__).resolve().parent


class BuildPyWithGenerator(build_py):
    """Copies ``templates/`` and ``ops.yaml`` into the generator package of the build."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):  # an editable install reads the checkout
            return
        target = Path(self.build_lib, *GENERATOR.split("."))
        shutil.copytree(HERE / "templates", target / "templates", dirs_exist_ok=True)
        shutil.copy2(HERE / "ops.yaml", target / "ops.yaml")


setup(
    # namespace discovery, so that data folders (the tuned tables) are packages of the wheel too
    packages=find_namespace_packages(include=["vllm_fl", "vllm_fl.*"], exclude=["*.__pycache__"])
    + [GENERATOR]
    + [f"{GENERATOR}.{sub}" for sub in find_packages("codegen")],
    package_dir={GENERATOR: "codegen"},
    cmdclass={"build_py": BuildPyWithGenerator},
)

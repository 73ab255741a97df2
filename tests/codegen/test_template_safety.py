"""Every template rendered with hostile strings wherever the manifest lets free text in (docs,
string defaults of signatures, literal test inputs, constructor arguments): the generated Python
has exactly the structure it has with harmless strings — the hostile text only ever ends up
inside string constants.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

from codegen import render as render_module
from codegen.generate import build, read_manifest
from codegen.vendor import pickable_ops, scaffold_vendor
from tests.support.codegen_trees import FIXTURES

#: every template but the vendor package's, which render the plugin's ops.yaml and identifiers
#: only (tests/codegen/test_vendor_package.py renders them)
TEMPLATES = sorted(
    str(p.relative_to(render_module.TEMPLATES))
    for p in render_module.TEMPLATES.rglob("*.j2")
    if p.parent.name != "vendor_package"
)
#: YAML single-quoted scalars (a quote is written twice); none holds a single quote, so each also
#: fits in a signature's string default
HOSTILE = [
    '"""; __import__("os").system("false"); """',
    '" + __import__("os").getcwd() + "',
    "ends with a backslash \\",
    'ends with a quote "',
    'ends with two quotes ""',
    '"""""""',
    "\\N{BULLET} \\x00 \\u2028 \\",
    "{{ op.name }} {% raw %} {# x #}",
    "# comment ``` <!-- --> | `` ` ``",
    '\\""" escaped already? \\\\"""',
    "x" * 150 + '"""' + "y" * 150,
]
BENIGN = "plain text"


def _manifest(text: str) -> str:
    """The fixture manifest plus an op carrying ``text`` in every free-text place."""
    default = text.replace("\\", "/")  # the signature language has no escapes
    op = f"""
  relu2:
    signature: 'relu2(Tensor x, str mode=''{default}'') -> Tensor'
    doc: '{text}'
    layer: vllm.model_executor.layers.activation.ReLUSquaredActivation
    impls:
      reference: act.relu2
      fast: act.relu2
    tests:
      dtypes: [float32]
      cases:
        - init: {{name: '{text}'}}
          inputs: {{x: [3, 16], mode: '{text}'}}
"""
    return (FIXTURES / "tree/ops.yaml").read_text().rstrip("\n") + "\n" + op


def _render(tmp: Path, text: str, monkeypatch) -> tuple[dict[str, str], set[str]]:
    """All outputs (code generation, then vendor scaffolding) and the templates used."""
    tree = tmp / "tree"
    shutil.copytree(FIXTURES / "tree", tree)
    (tree / "ops.yaml").write_text(_manifest(text))
    used: set[str] = set()
    env = render_module.environment()
    original = env.get_template

    def spy(name, *args, **kwargs):
        used.add(name)
        return original(name, *args, **kwargs)

    monkeypatch.setattr(env, "get_template", spy)
    manifest = read_manifest(tree / "ops.yaml", tree)
    files = build(manifest, tree)
    files.write(files.plan())
    every_op = ",".join(pickable_ops(manifest))
    vendor = scaffold_vendor("metax", every_op, tree / "ops.yaml", tree)
    vendor.write(vendor.plan())
    monkeypatch.undo()
    out = {
        str(p.relative_to(tree)): p.read_text()
        for p in sorted(tree.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }
    return out, used


def _shape(source: str, path: str) -> str:
    """The AST with every string constant blanked: what the code does, not what it says."""
    tree = ast.parse(source, path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            node.value = ""
    return ast.dump(tree)


@pytest.fixture(scope="module")
def benign(tmp_path_factory):
    patch = pytest.MonkeyPatch()
    try:
        return _render(tmp_path_factory.mktemp("benign"), BENIGN, patch)
    finally:
        patch.undo()


def test_every_template_is_rendered(benign):
    _, used = benign
    assert sorted(used) == TEMPLATES


@pytest.mark.parametrize("text", HOSTILE, ids=[f"hostile{i}" for i in range(len(HOSTILE))])
def test_hostile_text_stays_data(text, benign, tmp_path, monkeypatch):
    expected, _ = benign
    actual, used = _render(tmp_path, text, monkeypatch)
    assert sorted(used) == TEMPLATES
    assert sorted(actual) == sorted(expected)
    for path, source in actual.items():
        if path.endswith(".py"):
            assert _shape(source, path) == _shape(expected[path], path), path
        elif path.endswith(".md"):
            # one line per op entry, however the text looks: nothing breaks out of its line
            assert source.count("\n") == expected[path].count("\n"), path
    # and the text is all there, unchanged, in the method's docstring
    module = ast.parse(actual["vllm_fl/dispatch/spec.py"])
    base = next(n for n in module.body if isinstance(n, ast.ClassDef) and n.name == "FLBackendBase")
    method = next(n for n in base.body if isinstance(n, ast.FunctionDef) and n.name == "relu2")
    doc = " ".join((ast.get_docstring(method) or "").split())
    assert " ".join(text.replace("''", "'").split()) in doc

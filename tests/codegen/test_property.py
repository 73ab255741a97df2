"""Property: whatever is done to a valid manifest, the generator either succeeds or reports one
error line naming the place, and an error never writes a file. No traceback, ever."""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.codegen_trees import FIXTURES, snapshot_of
from codegen.cli import main

VALID = (FIXTURES / "tree/ops.yaml").read_text()
DATA = yaml.safe_load(VALID)
KNOWN_KEYS = [
    "kind",
    "vendor",
    "package",
    "priority",
    "requires",
    "device",
    "opaque",
    "probe",
    "signature",
    "doc",
    "layer",
    "reads",
    "impls",
    "tests",
    "dtypes",
    "cases",
    "init",
    "inputs",
    "tolerances",
    "fn",
    "shape",
    "dtype",
    "high",
    "values",
    "atol",
    "rtol",
    "reference",
    "fast",
    "acme",
    "x",
    "residual",
]
ERROR = re.compile(r"error: \S+?(:\d+)?: .+")

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(
        [
            "Tensor",
            "Tensor?",
            "flagos",
            "vendor",
            "cuda",
            "float32",
            "$dtype",
            "act.silu_and_mul",
            "f(Tensor x) -> Tensor",
            "a.b.C",
            "[1, 2]",
            "-> |",
        ]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(KNOWN_KEYS), inner, max_size=3)
    ),
    max_leaves=6,
)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _paths(value, prefix + (index,))


PATHS = [p for p in _paths(DATA) if p]


def _mutate(data, path, action, value, key):
    parent = data
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if action == "delete":
        del parent[last]
    elif action == "replace":
        parent[last] = value
    elif action == "add" and isinstance(parent[last], dict):
        parent[last][key] = value
    elif action == "rename" and isinstance(parent, dict):
        parent[key if key not in parent else key + "_"] = parent.pop(last)
    elif action == "duplicate" and isinstance(parent, list):
        parent.append(parent[last])


mutation = st.tuples(
    st.sampled_from(PATHS),
    st.sampled_from(["delete", "replace", "add", "rename", "duplicate"]),
    values,
    st.sampled_from(KNOWN_KEYS + ["bogus", "1x", "ops", "a-b"]),
)


def _check(manifest_text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "tree"
        shutil.copytree(FIXTURES / "expected", root)
        (root / "ops.yaml").write_text(manifest_text)
        before = snapshot_of(root)
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = main(["--root", str(root), "-q"])
        assert rc in (0, 1)
        if rc == 1:
            first = err.getvalue().splitlines()[0]
            assert ERROR.fullmatch(first), first
            assert ", expected " in first, first
            assert snapshot_of(root) == before, "an error left files changed"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mutation, min_size=1, max_size=3))
def test_mutated_manifest_never_crashes_or_half_writes(mutations):
    data = yaml.safe_load(VALID)
    for path, action, value, key in mutations:
        try:
            _mutate(data, path, action, value, key)
        except (KeyError, IndexError, TypeError):
            pass  # the path vanished under an earlier mutation
    _check(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(VALID) - 1), st.integers(0, 5), st.text(max_size=4))
def test_text_edits_never_crash_or_half_write(position, cut, insert):
    _check(VALID[:position] + insert + VALID[position + cut :])

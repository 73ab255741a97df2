"""Golden tests: the fixture manifest renders exactly the files under fixtures/expected; the
generator is idempotent, never touches hand-written code and catches stale files.

Refresh the golden files after an intended change with
``.venv/bin/python tests/codegen/refresh_golden.py`` and review the diff.
"""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REFRESH = ".venv/bin/python tests/codegen/refresh_golden.py"


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_output_matches_golden_files(generated):
    actual, expected = _files(generated), _files(FIXTURES / "expected")
    assert sorted(actual) == sorted(expected), f"file set differs; refresh with {REFRESH}"
    for path, text in expected.items():
        assert actual[path] == text, f"{path} differs from the golden file; refresh with {REFRESH}"


def test_second_run_changes_nothing(generated, cli, snapshot):
    before = snapshot(generated)
    rc, out, _ = cli("--root", generated)
    assert rc == 0
    assert "codegen: 0 file(s) changed" in out
    assert snapshot(generated) == before


def test_prints_changes_and_time(tree, cli):
    rc, out, _ = cli("--root", tree)
    assert rc == 0
    assert "  created  fxpkg/fast/register_ops.py" in out
    assert "  updated  README.md" in out
    assert out.rstrip().endswith(" s)")


def test_check_passes_on_a_fresh_tree(generated, cli):
    rc, out, _ = cli("--root", generated, "--check")
    assert rc == 0, out
    assert "up to date" in out


def test_check_detects_a_stale_file_with_a_diff_and_the_fix(generated, cli, snapshot):
    target = generated / "vllm_fl/ops/layernorm.py"
    target.write_text(target.read_text().replace('dispatch_method("rms_norm")', "None"))
    before = snapshot(generated)
    rc, out, _ = cli("--root", generated, "--check")
    assert rc == 1
    assert "--- a/vllm_fl/ops/layernorm.py" in out
    assert '+    forward_oot = dispatch_method("rms_norm")' in out
    assert "run `make codegen`" in out
    assert snapshot(generated) == before  # --check writes nothing


def test_check_detects_a_missing_stub_and_a_stale_readme(generated, cli):
    (generated / "fxpkg/vendor/acme/impl/attention.py").unlink()
    readme = generated / "README.md"
    readme.write_text(readme.read_text().replace("| `pick_backend`", "| `picked`"))
    rc, out, _ = cli("--root", generated, "--check")
    assert rc == 1
    assert "fxpkg/vendor/acme/impl/attention.py" in out
    assert "README.md" in out


def test_existing_functions_are_never_modified(generated):
    act = (generated / "fxpkg/fast/impl/act.py").read_text()
    original = (FIXTURES / "tree/fxpkg/fast/impl/act.py").read_text()
    assert act.startswith(original.rstrip("\n"))
    assert 'raise NotImplementedError(\n        "fast silu_and_mul: write the kernel here' in act
    norm = FIXTURES / "tree/fxpkg/fast/impl/norm.py"
    assert (generated / "fxpkg/fast/impl/norm.py").read_text() == norm.read_text()


def test_readme_without_markers_is_left_alone(tree, cli):
    (tree / "README.md").write_text("# no markers here\n")
    assert cli("--root", tree)[0] == 0
    assert (tree / "README.md").read_text() == "# no markers here\n"
    assert "| `rms_norm` | `RMSNorm` |" in (tree / "docs/operators.md").read_text()


def test_removed_op_deletes_its_generated_files(generated, cli):
    manifest = generated / "ops.yaml"
    text = manifest.read_text()
    start = text.index("  silu_and_mul:\n")
    end = text.index("  rms_norm:\n")
    manifest.write_text(text[:start] + text[end:])
    rc, out, _ = cli("--root", generated)
    assert rc == 0, out
    assert "  deleted  tests/generated/test_parity_silu_and_mul.py" in out
    assert "  deleted  vllm_fl/ops/activation.py" in out
    assert not (generated / "tests/generated/test_parity_silu_and_mul.py").exists()
    # hand-written impl modules stay
    assert (generated / "fxpkg/reference/impl/act.py").exists()


def test_signature_mismatch_names_function_and_manifest_lines(generated, cli, snapshot):
    act = generated / "fxpkg/reference/impl/act.py"
    act.write_text(act.read_text().replace("x: torch.Tensor)", "y: torch.Tensor)"))
    before = snapshot(generated)
    rc, _, err = cli("--root", generated)
    assert rc == 1
    assert (
        "error: fxpkg/reference/impl/act.py:6: silu_and_mul(self, y) does not match op "
        "'silu_and_mul' (ops.yaml:34: silu_and_mul(Tensor x) -> Tensor), "
        "expected def silu_and_mul(self, x)"
    ) in err
    assert "nothing was written" in err
    assert snapshot(generated) == before


def test_wrong_default_is_a_mismatch(generated, cli):
    norm = generated / "fxpkg/reference/impl/norm.py"
    norm.write_text(norm.read_text().replace("residual: torch.Tensor | None = None", "residual=0"))
    rc, _, err = cli("--root", generated)
    assert rc == 1
    assert "fxpkg/reference/impl/norm.py:6: rms_norm(self, x, residual=0) does not match" in err
    assert "expected def rms_norm(self, x, residual=None)" in err


def test_eager_variant_signature_mismatch_names_both_lines(generated, cli):
    norm = generated / "fxpkg/fast/impl/norm.py"
    text = norm.read_text()
    start = text.index("def rms_norm_inplace(")
    norm.write_text(text[:start] + text[start:].replace("residual: torch", "res: torch", 1))
    rc, _, err = cli("--root", generated)
    assert rc == 1
    line = text[:start].count("\n") + 1
    assert (
        f"error: fxpkg/fast/impl/norm.py:{line}: rms_norm_inplace(self, x, res=None) does not "
        "match eager variant of op 'rms_norm' (ops.yaml:"
    ) in err
    assert "expected def rms_norm_inplace(self, x, residual=None)" in err


def test_missing_eager_variant_is_scaffolded_as_a_stub(tree, cli):
    norm = tree / "fxpkg/fast/impl/norm.py"
    text = norm.read_text()
    norm.write_text(text[: text.index("\n\ndef rms_norm_inplace(")] + "\n")
    assert cli("--root", tree)[0] == 0
    stubbed = norm.read_text()
    assert "def rms_norm_inplace(\n    self, x: torch.Tensor, residual" in stubbed
    assert "fast rms_norm: write the in-place eager variant here" in stubbed
    assert "may overwrite ``x``, ``residual``" in stubbed


def test_a_retired_output_the_record_lists_is_deleted(generated, cli):
    """The backend contract moved from vllm_fl/dispatch/ops.py to spec.py: a tree generated
    before still lists the old file in its record, and the next run deletes it."""
    from codegen.files import RECORD

    old = generated / "vllm_fl/dispatch/ops.py"
    old.write_text((generated / "vllm_fl/dispatch/spec.py").read_text())
    record = generated / RECORD
    record.write_text(record.read_text() + "vllm_fl/dispatch/ops.py\n")
    rc, out, err = cli("--root", generated)
    assert rc == 0, err
    assert "  deleted  vllm_fl/dispatch/ops.py" in out
    assert not old.exists()
    assert "vllm_fl/dispatch/ops.py" not in record.read_text()

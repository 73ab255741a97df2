"""The configuration reference is generated from the settings table and kept current."""

from pathlib import Path

from vllm_fl.dispatch import __main__ as cli
from vllm_fl.dispatch.config import docs, settings

REPO = Path(__file__).resolve().parents[3]


def test_generated_configuration_docs_are_current():
    stale = docs.stale(REPO)
    assert not stale, f"stale: {[str(p) for p in stale]}; run `python -m vllm_fl.dispatch docs`"


def test_every_variable_is_a_row_of_the_generated_table():
    table = docs.settings_table()
    for setting in settings.SETTINGS:
        for env in setting.env:
            assert f"| `{env.name}` |" in table
        if setting.file_key:
            assert f"| `{setting.file_key}` |" in table


def test_flagcx_path_says_what_it_enables():
    (row,) = [line for line in docs.settings_table().splitlines() if "`FLAGCX_PATH`" in line]
    assert "`vendor:flagcx` backend of the collectives" in row and "reserved" not in row


def test_docs_command_fills_the_readme_region_and_checks(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n## Configuration\n\n{docs.BEGIN}\nOLD-TABLE\n{docs.END}\n\nafter\n")
    assert cli.main(["docs", "--check", "--root", str(tmp_path)]) == 1
    assert "run `python -m vllm_fl.dispatch docs`" in capsys.readouterr().err
    assert cli.main(["docs", "--root", str(tmp_path)]) == 0
    text = readme.read_text()
    assert "OLD-TABLE" not in text and docs.settings_table() in text and text.endswith("after\n")
    assert (tmp_path / "docs" / "configuration.md").read_text() == docs.configuration_md()
    assert cli.main(["docs", "--check", "--root", str(tmp_path)]) == 0


def test_a_readme_without_the_region_is_left_alone(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# x\n")
    assert cli.main(["docs", "--root", str(tmp_path)]) == 0
    assert readme.read_text() == "# x\n"

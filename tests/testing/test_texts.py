"""CPython's own passages: found in this installation, read without side effects."""

from __future__ import annotations

import pytest

from vllm_fl.testing import texts


def test_the_zen_of_python_is_read_without_printing(capsys):
    zen = texts.zen_of_python()
    assert zen.startswith("The Zen of Python, by Tim Peters")
    assert "Beautiful is better than ugly." in zen and zen.endswith("let's do more of those!")
    assert capsys.readouterr().out == ""


def test_the_passages_are_whole_paragraphs():
    found = texts.passages()
    assert list(found) == list(texts.NAMES)
    assert found["history"].startswith("Python was created in the early 1990s")
    assert found["history"].endswith("the various releases.")
    assert found["psf-license"].startswith("3. In the event Licensee")
    assert found["psf-license"].endswith("Agreement.")
    assert "Copyright" not in found["psf-license"]  # clause 2's years change every release


def test_a_missing_license_file_says_where_it_looked(monkeypatch, tmp_path):
    monkeypatch.setattr(texts, "license_candidates", lambda: [tmp_path / "LICENSE.txt"])
    with pytest.raises(texts.TextUnavailable, match="looked at .*LICENSE.txt"):
        texts.passages()


def test_a_missing_passage_is_named():
    with pytest.raises(texts.TextUnavailable, match="from 'x' to 'y'"):
        texts.between("abc", "x", "y")


def test_the_language_reference_chapters_are_long_prose():
    docs = texts.passages()["python-docs"]
    assert docs.startswith("Execution model")
    assert "import system" in docs and len(docs.split()) > 4000


def test_a_missing_reference_topic_is_named(monkeypatch):
    monkeypatch.setattr(texts, "DOC_TOPICS", ("execmodel", "no-such-topic"))
    with pytest.raises(texts.TextUnavailable, match="no topic no-such-topic"):
        texts.language_reference()

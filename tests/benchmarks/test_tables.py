"""The benchmarks' terminal and Markdown tables."""

from __future__ import annotations

import pytest

from benchmarks.tables import Column, markdown_table, text_table


def test_text_table_aligns_columns_and_prints_missing_values():
    cols = [Column("name", align="<"), Column("us", ".1f"), Column("n")]
    assert text_table(cols, [("a", 1.25, 3), ("long", None, 10)]).splitlines() == [
        "name   us   n",
        "a     1.2   3",
        "long    -  10",
    ]


def test_markdown_table_right_aligns_numeric_columns():
    cols = [Column("op", align="<"), Column("us", ".1f")]
    assert markdown_table(cols, [("x", 2.0)]).splitlines() == [
        "| op | us |",
        "|---|---:|",
        "| x | 2.0 |",
    ]


def test_a_row_of_the_wrong_width_is_refused():
    with pytest.raises(ValueError, match="a row has 1 cells for 2 columns"):
        text_table([Column("a"), Column("b")], [("x",)])

"""The accuracy task's arithmetic, without vLLM: perplexity, a choice's log-probability, the
multiple-choice score, and the cloze items (the same for the same seed)."""

from __future__ import annotations

import math

import pytest

from vllm_fl.testing import texts
from vllm_fl.testing.accuracy import (
    CHOICES,
    DEFAULTS,
    ClozeItem,
    choice_logprob,
    cloze_items,
    multiple_choice,
    perplexity,
)


def test_perplexity_is_exp_of_the_mean_negative_log_likelihood():
    found = perplexity([math.log(0.5), math.log(0.25)])
    assert found["tokens"] == 2
    assert found["nll"] == pytest.approx(math.log(8))
    assert found["ppl"] == pytest.approx(math.sqrt(8))  # geometric mean of 2 and 4
    assert perplexity([0.0] * 5)["ppl"] == 1.0
    with pytest.raises(ValueError, match="no tokens"):
        perplexity([])


class _Logprob:
    """vLLM's Logprob, as far as the scoring reads it."""

    def __init__(self, logprob: float):
        self.logprob = logprob


def test_a_choice_scores_only_its_own_tokens():
    tokens = [7, 8, 9, 10]
    prompt_logprobs = [None, {8: _Logprob(-1.0)}, {9: _Logprob(-2.0), 3: -0.1}, {10: -0.5}]
    assert choice_logprob(prompt_logprobs, tokens, 2) == -2.5
    assert choice_logprob(prompt_logprobs, tokens, 1) == -3.5
    with pytest.raises(ValueError, match="first token"):
        choice_logprob(prompt_logprobs, tokens, 0)


def test_multiple_choice_picks_the_best_and_reports_the_standard_error():
    scored = multiple_choice(
        [[-1, -2, -3, -4], [-5, -1, -2, -3], [-1, -1, -9, -9], [0, -1, -2, -3]], [0, 1, 1, 3]
    )
    assert scored["picks"] == [0, 1, 0, 0]  # a tie goes to the first
    assert scored["correct"] == 2 and scored["accuracy"] == 0.5
    assert scored["stderr"] == pytest.approx(math.sqrt(0.5 * 0.5 / 4))
    with pytest.raises(ValueError, match="3 items scored, 2 answers"):
        multiple_choice([[0.0]] * 3, [0, 0])


TEXT = (
    " ".join(f"word{i} alpha beta gamma, delta." for i in range(4)) + " Epsilon zeta eta theta iota"
)


def test_cloze_items_are_the_same_for_the_same_seed():
    first = cloze_items(TEXT, 5, seed=3, window=4)
    assert first == cloze_items(TEXT, 5, seed=3, window=4)
    assert first != cloze_items(TEXT, 5, seed=4, window=4)


def test_a_cloze_item_is_the_true_next_word_among_other_words_of_the_text():
    words = TEXT.split()
    for item in cloze_items(TEXT, 8, seed=0, window=4):
        assert len(item.choices) == CHOICES == len({c.lower() for c in item.choices})
        context = item.context.split()
        assert len(context) == 4
        # the context is four consecutive words of the text, and the answer the word after them
        starts = [i for i in range(len(words)) if words[i : i + 4] == context]
        assert any(words[i + 4].strip(",.") == item.choices[item.answer] for i in starts)
        assert all(c.isalpha() and c in TEXT for c in item.choices)


def test_cloze_refuses_more_items_than_blanks():
    with pytest.raises(ValueError, match="possible blanks"):
        cloze_items("one two three four", 3, window=2)
    with pytest.raises(ValueError, match="too few distinct words"):
        cloze_items("one two three three", 1, window=2)


def test_the_shipped_passages_give_the_default_cloze_task():
    for text in texts.passages().values():
        items = cloze_items(
            text, DEFAULTS["cloze_per_passage"], seed=0, window=DEFAULTS["cloze_window"]
        )
        assert len(items) == 50 and all(isinstance(i, ClozeItem) for i in items)
        # the answers are spread over the positions, not all first
        assert len({i.answer for i in items}) == CHOICES


def test_token_windows_cover_the_passage_in_order():
    from vllm_fl.testing.accuracy import token_windows

    ids = list(range(10))
    assert token_windows(ids, 4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert token_windows(ids, 10) == [ids]
    with pytest.raises(ValueError, match="at least 2"):
        token_windows(ids, 1)

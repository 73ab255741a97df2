"""How well a real model does, measured inside the engine: greedy text, perplexity, a cloze task.

`accuracy_task` is an engine task (`Workload.task` = `TASK`, run inside
`vllm_fl.testing.engine`) for a real checkpoint with a tokenizer (`vllm_fl.testing.checkpoint`).
In one engine it computes

- ``greedy``: the greedy continuation (text and token ids, at most ``max_tokens``) of plain
  prompts and of chat prompts (the tokenizer's chat template);
- ``perplexity``: per passage of `vllm_fl.testing.texts`, the model's perplexity on it through
  ``prompt_logprobs``: every token after the first is scored given the ones before it (a
  passage longer than ``window_tokens`` in windows, each scored on its own); the token count,
  the total negative log-likelihood (nats) and exp(mean);
- ``cloze``: a multiple-choice task built from the same passages (`cloze_items`): a context of
  words, the true next word and three other words of the passage; each choice scored the usual
  way (the summed log-probability of its tokens after the context), the best one picked;
  accuracy and its standard error;

and the impl each op used in the workers (``worker_used_impls``). Every option has a default
(`DEFAULTS`); ``task_options`` overrides them. The passages need a context longer than
vLLM's default for the tests' tiny models: run it with ``llm_args`` including `LLM_ARGS`.

The arithmetic (`perplexity`, `choice_logprob`, `multiple_choice`, `cloze_items`) is plain
Python, tested without vLLM.
"""

from __future__ import annotations

import math
import random
import string
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from vllm_fl.testing.scoring import worker_used_impls

#: the engine task of this module, for `Workload.task`
TASK = "vllm_fl.testing.accuracy:accuracy_task"
#: `vllm.LLM` arguments the task needs besides the caller's (the longest passage is ~400 tokens)
LLM_ARGS = {"max_model_len": 1024}
DEFAULTS = {
    "prompts": [
        "The capital of France is",
        "The Zen of Python, by",
        "def fibonacci(n):",
    ],
    "chat_prompts": ["What is the capital of France?"],
    "max_tokens": 16,
    "passages": None,  # None: every passage of vllm_fl.testing.texts
    "cloze_per_passage": 50,
    "cloze_window": 8,  # words of context before the blank (16: nearly every answer right)
    "cloze_seed": 0,
    "window_tokens": 960,  # longest stretch of a passage scored at once (< max_model_len)
}
#: words a cloze blank may be: letters only, at least this long (no "a", "of", numbers)
MIN_BLANK_LETTERS = 3
CHOICES = 4


@dataclass(frozen=True)
class ClozeItem:
    """One multiple-choice question: which of `choices` follows `context` (after a space)."""

    context: str
    choices: tuple[str, ...]
    answer: int  # index of the true next word in choices


def perplexity(logprobs: Sequence[float]) -> dict:
    """Token count, total negative log-likelihood (nats) and perplexity, exp(mean NLL), of the
    scored tokens' log-probabilities."""
    if not logprobs:
        raise ValueError("perplexity of no tokens")
    nll = -math.fsum(logprobs)
    return {"tokens": len(logprobs), "nll": nll, "ppl": math.exp(nll / len(logprobs))}


def _logprob(candidate) -> float:
    """A candidate's log-probability: vLLM's Logprob object or a plain number."""
    return float(getattr(candidate, "logprob", candidate))


def choice_logprob(
    prompt_logprobs: Sequence[Mapping | None], token_ids: Sequence[int], start: int
) -> float:
    """The summed log-probability of ``token_ids[start:]``, each given the tokens before it:
    ``prompt_logprobs[i]`` maps token ids to their log-probability at position i (vLLM's
    ``RequestOutput.prompt_logprobs``; entry 0 is None)."""
    if start < 1:
        raise ValueError("the first token of a prompt has no log-probability")
    return math.fsum(
        _logprob(prompt_logprobs[i][token_ids[i]]) for i in range(start, len(token_ids))
    )


def multiple_choice(scores: Sequence[Sequence[float]], answers: Sequence[int]) -> dict:
    """Each item's pick (the highest score; the first on a tie), the accuracy p over the n items
    and its standard error sqrt(p(1-p)/n)."""
    if len(scores) != len(answers) or not scores:
        raise ValueError(f"{len(scores)} items scored, {len(answers)} answers")
    picks = [max(range(len(row)), key=row.__getitem__) for row in scores]
    correct = sum(pick == answer for pick, answer in zip(picks, answers))
    p = correct / len(scores)
    return {
        "items": len(scores),
        "correct": correct,
        "accuracy": p,
        "stderr": math.sqrt(p * (1 - p) / len(scores)),
        "picks": picks,
    }


def _core(word: str) -> str:
    """A word without the punctuation around it."""
    return word.strip(string.punctuation + "“”‘’")


def token_windows(ids: Sequence[int], size: int) -> list[list[int]]:
    """``ids`` cut into consecutive windows of at most ``size`` tokens (the last one shorter);
    each window's first token is context only, so a cut costs one scored token."""
    if size < 2:
        raise ValueError(f"window of {size} token(s): at least 2 are needed to score one")
    return [list(ids[k : k + size]) for k in range(0, len(ids), size)]


def cloze_items(text: str, count: int, seed: int = 0, window: int = 8) -> list[ClozeItem]:
    """`count` cloze questions from `text`, the same for the same arguments: blanks at words of
    letters only (`MIN_BLANK_LETTERS` or more) with at least `window` words before them, drawn
    with `seed`; the context is the `window` words before the blank (joined by spaces), the
    choices the blank's word and three other distinct words of `text` (case aside), in an
    order drawn with the same seed."""
    rng = random.Random(seed)
    words = text.split()
    cores = [_core(w) for w in words]
    blankable = [
        i
        for i in range(window, len(words))
        if cores[i].isalpha() and len(cores[i]) >= MIN_BLANK_LETTERS
    ]
    vocabulary = sorted({c for c in cores if c.isalpha() and len(c) >= MIN_BLANK_LETTERS})
    if len(blankable) < count:
        raise ValueError(f"the text has {len(blankable)} possible blanks, {count} asked for")
    items = []
    for i in sorted(rng.sample(blankable, count)):
        others = [w for w in vocabulary if w.lower() != cores[i].lower()]
        distractors = []
        for word in rng.sample(others, len(others)):
            if word.lower() not in {d.lower() for d in distractors}:
                distractors.append(word)
            if len(distractors) == CHOICES - 1:
                break
        if len(distractors) < CHOICES - 1:
            raise ValueError(f"the text has too few distinct words for {CHOICES} choices")
        choices = [cores[i], *distractors]
        order = rng.sample(range(CHOICES), CHOICES)
        items.append(
            ClozeItem(
                context=" ".join(words[i - window : i]),
                choices=tuple(choices[k] for k in order),
                answer=order.index(0),
            )
        )
    return items


def accuracy_task(llm, workload) -> dict:
    """Greedy text, perplexity and cloze accuracy (see the module docstring)."""
    from vllm import SamplingParams

    from vllm_fl.testing import texts

    options = {**DEFAULTS, **workload.task_options}
    tokenizer = llm.get_tokenizer()
    chats = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
        )
        for text in options["chat_prompts"]
    ]
    prompts = [*options["prompts"], *chats]
    started = time.perf_counter()
    greedy_params = SamplingParams(temperature=0.0, max_tokens=options["max_tokens"])
    generated = llm.generate(prompts, greedy_params, use_tqdm=False)
    greedy = [
        {"prompt": p, "text": o.outputs[0].text, "token_ids": list(o.outputs[0].token_ids)}
        for p, o in zip(prompts, generated)
    ]

    greedy_s = time.perf_counter() - started
    found = texts.passages()
    names = options["passages"] or list(texts.NAMES)
    # a passage longer than the model's context is scored in windows, each on its own
    windows = [
        (name, window)
        for name in names
        for window in token_windows(
            list(tokenizer(found[name]).input_ids), options["window_tokens"]
        )
    ]
    passage_ids = [ids for _, ids in windows]
    items = [
        item
        for name in names
        for item in cloze_items(
            found[name],
            options["cloze_per_passage"],
            options["cloze_seed"],
            options["cloze_window"],
        )
    ]
    # context and continuation are tokenized apart (as evaluation harnesses do): the choice's
    # tokens are exactly those scored, whatever a merge across the boundary would have made
    scored = []  # (token ids, index of the first scored token)
    for item in items:
        context = list(tokenizer(item.context).input_ids)
        for choice in item.choices:
            continuation = tokenizer(" " + choice, add_special_tokens=False).input_ids
            scored.append((context + list(continuation), len(context)))
    sequences = passage_ids + [ids for ids, _ in scored]
    # one new token per sequence: only the prompt's log-probabilities are wanted
    score_params = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=0)
    started = time.perf_counter()
    outputs = llm.generate(
        [{"prompt_token_ids": ids} for ids in sequences], score_params, use_tqdm=False
    )
    scoring_s = time.perf_counter() - started
    per_passage: dict[str, list[float]] = {name: [] for name in names}
    for (name, ids), output in zip(windows, outputs):
        per_passage[name] += [
            _logprob(output.prompt_logprobs[i][ids[i]]) for i in range(1, len(ids))
        ]
    ppl = {name: perplexity(logprobs) for name, logprobs in per_passage.items()}
    choice_scores = [
        choice_logprob(output.prompt_logprobs, ids, start)
        for (ids, start), output in zip(scored, outputs[len(passage_ids) :])
    ]
    rows = [choice_scores[k : k + CHOICES] for k in range(0, len(choice_scores), CHOICES)]
    cloze = multiple_choice(rows, [item.answer for item in items])
    cloze["choice_logprobs"] = rows
    workers = llm.collective_rpc(worker_used_impls)
    return {
        "greedy": greedy,
        "perplexity": ppl,
        "cloze": cloze,
        "worker_used_impls": workers[0] if workers else {},
        # measured, never asserted: the scoring's share of a run
        "greedy_s": round(greedy_s, 3),
        "scoring_s": round(scoring_s, 3),
        "scored_tokens": len(sequences) and sum(len(ids) for ids in sequences),
    }

"""Teacher-forced scoring: how one model ranks the tokens another model generated.

`score_task` is an engine task (`Workload.task`, run inside `vllm_fl.testing.engine`): with
``task_options = {"prompts": [text], "continuations": [[token ids]]}`` it feeds each prompt's
tokens followed by its continuation to the engine's model as one prompt (greedy, one new token,
``prompt_logprobs``) and reports, for every continuation token, the rank the model gives it at
that position (1: the model's own greedy choice) and how many nats its log-probability lies below
the model's best token there. Two checkpoints meant to compute the same model (a quantized one
and what its weights stand for) can so be compared step by step, although their greedy outputs
part ways once noise tips a near-tie. It also reports the impls each op used in the workers
(``collective_rpc``), where vLLM's default process layout keeps the model.
"""

from __future__ import annotations

#: the engine task of this module, for `Workload.task`
TASK = "vllm_fl.testing.scoring:score_task"


def worker_used_impls(worker) -> dict[str, str]:
    """In a worker (``LLM.collective_rpc``): the impl each op of the dispatch used there."""
    import sys

    if "vllm_fl.dispatch" not in sys.modules:
        return {}
    from vllm_fl.dispatch import get_default_manager

    return dict(sorted(get_default_manager().used_impls().items()))


def score_task(llm, workload) -> dict:
    """Rank and log-probability gap of every continuation token (see the module docstring)."""
    from vllm import SamplingParams

    options = workload.task_options
    tokenizer = llm.get_tokenizer()
    prompts = [list(tokenizer(text).input_ids) for text in options["prompts"]]
    sequences = [p + list(c) for p, c in zip(prompts, options["continuations"])]
    params = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=1)
    outputs = llm.generate([{"prompt_token_ids": s} for s in sequences], params, use_tqdm=False)
    ranks, gaps = [], []
    for prompt, sequence, output in zip(prompts, sequences, outputs):
        seq_ranks, seq_gaps = [], []
        for position in range(len(prompt), len(sequence)):
            candidates = output.prompt_logprobs[position]
            chosen = candidates[sequence[position]]
            best = max(candidate.logprob for candidate in candidates.values())
            seq_ranks.append(int(chosen.rank))
            seq_gaps.append(round(float(best - chosen.logprob), 4))
        ranks.append(seq_ranks)
        gaps.append(seq_gaps)
    workers = llm.collective_rpc(worker_used_impls)
    return {"ranks": ranks, "gaps": gaps, "worker_used_impls": workers[0] if workers else {}}

"""Engine tasks of ``python -m vllm_fl.verify`` (``vllm_fl.testing.engine``'s ``Workload.task``):
they run in the engine's child once vLLM is built, and return what the command prints.

- ``generate``: greedy tokens of the prompts with bring-up mode on (through the environment;
  each process that runs the model writes its report when it exits), then again with it paused:
  both generations timed, and their tokens, which must be equal, reported.
- ``bisect``: one engine, several configurations: the ops' selection as the policy says, with
  bring-up mode on (the ops the model calls are counted meanwhile: only they are bisected; each
  op's calls over tolerance tell a wrong kernel from one that only rounds differently), then
  all-reference, then groups of ops on their selected impls and the rest on the reference
  (``vllm_fl.verify.bisect``). Each configuration is a per-op policy (what ``VLLM_FL_PER_OP``
  says: ``op=impl:<selected id>`` or ``op=reference``) set in every worker between two
  generations, so the model is built once; prefix caching is off, so no configuration reuses
  another's KV cache.
"""

from __future__ import annotations

from typing import Any

from .bisect import find_culprits, first_divergence
from .report import merge

__all__ = ["generate", "bisect", "REFERENCE_ID"]

REFERENCE_ID = "reference.torch"


def _generate(llm, prompts: list, max_tokens: int, detokenize: bool = True) -> list[list[int]]:
    from vllm_fl.testing.engine import sampling_params

    outputs = llm.generate(prompts, sampling_params(max_tokens, detokenize), use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outputs]


def _options(workload) -> tuple[list, int]:
    """The prompts (text, or token ids where the workload has a prompt length) and the tokens
    to generate."""
    from vllm_fl.testing.engine import TEXT_PROMPTS, prompts

    if workload.prompt_len is not None:
        return prompts(workload), workload.max_tokens
    texts = workload.task_options.get("prompts") or list(TEXT_PROMPTS)
    return list(texts), workload.max_tokens


def generate(llm, workload) -> dict[str, Any]:
    import time

    prompts, max_tokens = _options(workload)
    steps_before = _rpc(llm, worker_verification, None)
    start = time.perf_counter()
    tokens = _generate(llm, prompts, max_tokens, workload.detokenize)
    on_s = time.perf_counter() - start
    steps = _rpc(llm, worker_verification, True) - steps_before  # pauses it
    start = time.perf_counter()
    tokens_off = _generate(llm, prompts, max_tokens, workload.detokenize)
    off_s = time.perf_counter() - start
    _rpc(llm, worker_verification, False)
    return {
        "tokens": tokens,
        "tokens_unverified": tokens_off,
        "verified_s": round(on_s, 4),
        "unverified_s": round(off_s, 4),
        "steps": steps,
    }


# -- run in the worker (``LLM.collective_rpc``) ------------------------------------------------


def worker_used_impls(worker=None) -> dict[str, str]:
    """op -> the impl id selected for eager calls in this worker."""
    from vllm_fl.dispatch import get_default_manager

    return dict(get_default_manager().used_impls())


def worker_verification(worker=None, paused: bool | None = None) -> int:
    """Pause (True) or resume (False) bring-up mode in this worker; the engine steps counted."""
    from .process import current

    verifier = current()
    if verifier is None:
        return 0
    if paused is not None:
        verifier.paused = paused
    return verifier.step


def worker_verify(worker=None, on: bool = True) -> dict[str, Any]:
    """Bring-up mode on (every eager call of every op) in this worker, or off: then the JSON
    report of what it verified, with every op's calls counted."""
    from . import process

    if on:
        process.enable(worker.get_model() if worker is not None else None, ops=True, every=1)
        return {}
    verifier = process.disable()
    return verifier.recorder.to_json() if verifier is not None else {}


def worker_set_per_op(worker=None, per_op: dict[str, str] | None = None) -> None:
    """The policy the worker started with, its per-op lists updated with ``per_op`` (op -> one
    token); None: that policy itself."""
    from vllm_fl.dispatch import get_policy, set_global_policy

    holder = worker if worker is not None else worker_set_per_op
    base = getattr(holder, "_vllm_fl_base_policy", None)
    if base is None:
        base = get_policy()
        setattr(holder, "_vllm_fl_base_policy", base)
    if per_op is None:
        set_global_policy(base)
        return
    order = {**base.per_op_order, **{op: (token,) for op, token in per_op.items()}}
    set_global_policy(base.replace("vllm_fl.verify bisect", per_op_order=order))


def _rpc(llm, fn, *args):
    return llm.collective_rpc(fn, args=args)[0]


def bisect(llm, workload) -> dict[str, Any]:
    prompts, max_tokens = _options(workload)
    detokenize = workload.detokenize
    # the policy's selection, verified: which ops the model calls, and whether a culprit found
    # below is also over tolerance (a wrong kernel) or only rounds differently
    _rpc(llm, worker_verify, True)
    selected_tokens = _generate(llm, prompts, max_tokens, detokenize)
    report = merge(r for r in llm.collective_rpc(worker_verify, args=(False,)) if r)
    called = {op: entry["calls"] for op, entry in report.ops.items()}
    used = {op: impl for op, impl in _rpc(llm, worker_used_impls).items() if called.get(op)}
    verdicts = {
        op: {
            "verified": entry["verified"],
            "over_tolerance": sum(r.exceeded for r in report.rows if r.op == op),
        }
        for op, entry in report.ops.items()
    }
    candidates = sorted(op for op, impl in used.items() if impl != REFERENCE_ID)
    runs = 1

    def tokens_with(on_selected: tuple[str, ...]) -> list[list[int]]:
        nonlocal runs
        per_op = {op: f"impl:{used[op]}" if op in on_selected else "reference" for op in candidates}
        _rpc(llm, worker_set_per_op, per_op)
        runs += 1
        return _generate(llm, prompts, max_tokens, detokenize)

    baseline = tokens_with(()) if candidates else selected_tokens
    divergence = first_divergence(selected_tokens, baseline)
    divergences: dict[str, Any] = {}

    def changes(group: tuple[str, ...]) -> bool:
        if tuple(sorted(group)) == tuple(candidates):
            found = divergence
        else:
            found = first_divergence(tokens_with(group), baseline)
        if len(group) == 1 and found is not None:
            divergences[group[0]] = found
        return found is not None

    result = find_culprits(candidates, changes) if divergence is not None else None
    _rpc(llm, worker_set_per_op, None)
    return {
        "used_impls": used,
        "candidates": candidates,
        "selected_tokens": selected_tokens,
        "reference_tokens": baseline,
        "divergence": divergence,
        "culprits": result.culprits if result else [],
        "culprit_divergence": divergences,
        "verdicts": verdicts,
        "tried": [[list(g), changed] for g, changed in result.tried] if result else [],
        "generations": runs,
    }

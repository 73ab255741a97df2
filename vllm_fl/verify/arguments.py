"""The arguments one verified call's references get, and what of a call is compared.

Before the selected impl runs, ``CallCopy.before`` copies the call's tensor arguments (an impl may
write into its ``mutates`` arguments or, in its eager variant, its ``inplace`` ones), except the
layer's and the model's weights (``Parameter``: no impl writes those) and the paged KV cache,
which is never copied:

- an op that reads the cache (``cache`` without ``slots`` in ops.yaml) gets the real cache;
- an op that writes it (``cache`` with ``slots``) is checked on the slots the call writes: their
  entries are gathered before the call into a scratch cache of one slot per token, which the
  references write into through a slot mapping renumbered 0, 1, ... (-1 stays -1); after the
  call the same slots of the real cache are gathered and compared with the scratch.

So no verification allocates more than a small multiple of the call's own inputs and outputs.
An op's ``bounds`` (int arguments that only bound lengths the tensors give, ``max_seq_len``) reach
the references rounded up to a power of two: the same result, and a check recorded as a CUDA
graph (``vllm_fl.verify.replay``) that repeats while a sequence grows by a token a step.
``widened`` gives the same arguments in a wider dtype, for the reference that is the truth of
``vllm_fl.verify.compare``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from .check import Check

__all__ = ["CallCopy", "named_arguments", "rounded_bound", "with_rounded_bounds"]


def named_arguments(check: Check, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The call's arguments by name (the layer, if any, left out)."""
    positional = args[1:] if check.layer else args
    named = dict(zip(check.args, positional))
    named.update(kwargs)
    return named


def rounded_bound(value: Any) -> Any:
    """A positive int bound rounded up to a power of two (anything else as it is)."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return 1 << (value - 1).bit_length()
    return value


def with_rounded_bounds(check: Check, named: dict[str, Any]) -> dict[str, Any]:
    """``named`` with the op's ``bounds`` rounded up as the references get them."""
    return {name: rounded_bound(v) if name in check.bounds else v for name, v in named.items()}


def _copy(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter):
        return value.clone()
    return value


@dataclass
class _Slots:
    """The slots a cache-writing call writes: block and offset of each token (a -1 slot reads
    slot 0, masked by ``valid``)."""

    block: torch.Tensor
    offset: torch.Tensor
    valid: torch.Tensor

    @classmethod
    def of(cls, slots: torch.Tensor, block_size: int) -> _Slots:
        index = slots.to(torch.int64).clamp_min(0)
        return cls(index // block_size, index % block_size, slots >= 0)

    def gather(self, cache: torch.Tensor) -> torch.Tensor:
        """[tokens, *entry]: the entries of ``cache`` at the slots."""
        return cache[self.block, self.offset]


@dataclass
class CallCopy:
    """One call's arguments as a reference gets them (``args``, ``kwargs``), with the scratch
    caches of a cache-writing op and the entries its slots held before the call."""

    check: Check
    args: tuple
    kwargs: dict
    slots: _Slots | None = None
    #: cache name -> its slots' entries before the call [tokens, *entry]
    held: dict[str, torch.Tensor] = field(default_factory=dict)
    #: the real caches a reading op gets as they are (never copied nor widened)
    shared: tuple[int, ...] = ()

    @classmethod
    def before(cls, check: Check, args: tuple, kwargs: dict) -> CallCopy:
        """Copies of the call's arguments, taken before the impl runs."""
        named = named_arguments(check, args, kwargs)
        caches = set(check.cache)
        replaced: dict[str, Any] = {
            name: _copy(value)
            for name, value in with_rounded_bounds(check, named).items()
            if name not in caches
        }
        slots = None
        held: dict[str, torch.Tensor] = {}
        shared: list[int] = []
        if check.slots is not None and check.slots in named:
            mapping = named[check.slots]
            for name in check.cache:
                cache = named.get(name)
                if not isinstance(cache, torch.Tensor):
                    continue
                slots = slots or _Slots.of(mapping, cache.shape[1])
                held[name] = slots.gather(cache)
                # one slot per token: the reference's writes land in a cache of the call's size
                replaced[name] = held[name].clone().unsqueeze(1)
            if slots is not None:
                count = torch.arange(mapping.shape[0], device=mapping.device, dtype=mapping.dtype)
                replaced[check.slots] = torch.where(slots.valid, count, -1).to(mapping.dtype)
        else:
            for name in check.cache:
                if isinstance(named.get(name), torch.Tensor):
                    replaced[name] = named[name]
                    shared.append(id(named[name]))
        new_args, new_kwargs = _placed(check, args, kwargs, replaced)
        return cls(check, new_args, new_kwargs, slots, held, tuple(shared))

    def named(self) -> dict[str, Any]:
        return named_arguments(self.check, self.args, self.kwargs)

    def parts(self) -> tuple:
        """The copy as plain containers of tensors (what a CUDA graph of the check records):
        ``from_parts`` rebuilds it."""
        slots = None
        if self.slots is not None:
            slots = (self.slots.block, self.slots.offset, self.slots.valid)
        return self.args, self.kwargs, self.held, slots

    @classmethod
    def from_parts(
        cls, check: Check, shared: tuple[int, ...], args, kwargs, held, slots
    ) -> CallCopy:
        return cls(check, args, kwargs, _Slots(*slots) if slots else None, held, shared)

    def widened(self, dtype: torch.dtype) -> CallCopy:
        """The same arguments with every floating tensor that is not a weight nor a shared cache
        in ``dtype`` (``mutates`` copied again, since the reference in the call's dtype writes
        into this copy's)."""
        mutated = set(self.check.mutates)

        def wide(name: str, value: Any) -> Any:
            if not isinstance(value, torch.Tensor) or isinstance(value, torch.nn.Parameter):
                return value
            if id(value) in self.shared:
                return value
            if value.is_floating_point() and value.element_size() > 1:
                return value.to(dtype, copy=True)
            return value.clone() if name in mutated else value

        replaced = {name: wide(name, value) for name, value in self.named().items()}
        new_args, new_kwargs = _placed(self.check, self.args, self.kwargs, replaced)
        return CallCopy(self.check, new_args, new_kwargs, self.slots, self.held, self.shared)

    def form(self, out: Any, named: dict[str, Any], real: bool = False) -> Any:
        """What is compared of a call that returned ``out`` with arguments ``named`` after it:
        the written arguments (a cache: its slots' entries) or the result, in the op's
        canonical form where it has one. ``real``: the call of the selected impl (its caches are
        the real ones)."""
        check = self.check
        canonical = check.canonical_fn()
        if not check.mutates:
            return canonical(out, **named) if canonical is not None else out
        if canonical is not None:
            return canonical(**named)
        return tuple(self._written(name, named[name], real) for name in check.mutates)

    def _written(self, name: str, value: Any, real: bool) -> Any:
        if name not in self.held or self.slots is None:
            return value
        if not real:
            return value[:, 0]
        after = self.slots.gather(value)
        # a token with slot -1 writes nothing: compare what its slot 0 held before
        valid = self.slots.valid.view(-1, *([1] * (after.dim() - 1)))
        return torch.where(valid, after, self.held[name])


def _placed(check: Check, args: tuple, kwargs: dict, named: dict[str, Any]) -> tuple[tuple, dict]:
    """``args`` and ``kwargs`` with each argument taken from ``named``, where it was passed."""
    offset = 1 if check.layer else 0
    new_args = list(args)
    for index, name in enumerate(check.args):
        if offset + index < len(args) and name in named:
            new_args[offset + index] = named[name]
    new_kwargs = {k: named.get(k, v) for k, v in kwargs.items()}
    return tuple(new_args), new_kwargs

"""The kernel library's per-tensor memo: one derivation per tensor, version and key."""

import gc

import torch

from vllm_fl.kernels.memo import TensorMemo


def test_derived_once_per_tensor_and_key():
    memo, calls = TensorMemo(), []
    weight = torch.ones(4)

    def shifted():
        calls.append(1)
        return weight + 1.0

    first = memo.get(weight, "k", shifted)
    assert memo.get(weight, "k", shifted) is first
    assert len(calls) == 1
    memo.get(weight, "other", shifted)
    assert len(calls) == 2


def test_in_place_change_derives_again():
    memo = TensorMemo()
    weight = torch.ones(4)
    assert torch.equal(memo.get(weight, None, lambda: weight + 1.0), torch.full((4,), 2.0))
    weight.mul_(3)
    assert torch.equal(memo.get(weight, None, lambda: weight + 1.0), torch.full((4,), 4.0))


def test_equal_tensors_are_different_keys():
    memo = TensorMemo()
    a, b = torch.zeros(4), torch.zeros(4)
    assert memo.get(a, None, lambda: "a") == "a"
    assert memo.get(b, None, lambda: "b") == "b"


def test_freed_tensor_is_forgotten():
    memo = TensorMemo()
    weight = torch.ones(4)
    memo.get(weight, None, lambda: weight + 1.0)
    assert len(memo) == 1
    del weight
    gc.collect()
    assert len(memo) == 0

"""Layer weights that give their device storage back: what is released, what comes back, and
what the tensor keeps meanwhile (run on CPU tensors; the storage calls are the same on CUDA)."""

import gc

import torch

from vllm_fl.kernels import resident


def _weight(values: torch.Tensor) -> torch.nn.Parameter:
    return torch.nn.Parameter(values, requires_grad=False)


def test_a_released_weight_keeps_its_metadata_and_gets_its_values_back():
    original = torch.arange(24, dtype=torch.int32).reshape(4, 6)
    weight = _weight(original.clone())
    version = weight._version
    assert resident.release(weight)
    assert resident.is_released(weight)
    assert weight.untyped_storage().nbytes() == 0
    assert (weight.shape, weight.stride(), weight.dtype) == ((4, 6), (6, 1), torch.int32)
    assert resident.resident(weight) is weight
    assert not resident.is_released(weight)
    assert torch.equal(weight, original)
    # values derived from the weight (TensorMemo entries) stay valid: the version never moved
    assert weight._version == version


def test_a_restored_weight_stays_and_releasing_twice_is_one_release():
    weight = _weight(torch.ones(8))
    assert resident.release(weight) and resident.release(weight)
    resident.resident(weight)
    resident.resident(weight)
    assert torch.equal(weight, torch.ones(8))


def test_only_a_parameter_owning_its_whole_storage_is_released():
    plain = torch.ones(8)
    whole = _weight(torch.ones(4, 4))
    view = torch.nn.Parameter(whole.data[1:], requires_grad=False)
    transposed = torch.nn.Parameter(torch.ones(4, 2).t(), requires_grad=False)
    assert not resident.release(plain)
    assert not resident.release(view)
    assert not resident.release(transposed)
    assert not resident.release(_weight(torch.ones(0)))
    assert plain.untyped_storage().nbytes() == 32
    assert whole.untyped_storage().nbytes() == 64
    assert torch.equal(view, torch.ones(3, 4))


def test_other_tensors_pass_through_resident_unchanged():
    weight = _weight(torch.ones(4))
    resident.release(weight)
    other = torch.full((4,), 2.0)
    assert resident.resident(other) is other
    assert resident.is_released(weight)
    resident.resident(weight)


def test_a_freed_weight_drops_its_host_copy():
    weight = _weight(torch.ones(1024))
    resident.release(weight)
    key = resident._key(weight)
    del weight
    gc.collect()
    assert key not in resident._host

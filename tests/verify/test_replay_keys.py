"""The key of a recorded check (``vllm_fl.verify.replay``), on the CPU: it must change whenever
the recorded graph would compute something else, and only then, or a replay would either be
wrong or never happen."""

from __future__ import annotations

import torch

from vllm_fl.verify.replay import _Leaves, _substituted


def _key(state, keep=lambda t: isinstance(t, torch.nn.Parameter)):
    return tuple(_Leaves(state, keep).key)


def test_other_values_of_the_same_shapes_share_a_key():
    a = (torch.randn(3, 8), {"eps": 1e-6}, [torch.zeros(3, dtype=torch.int64)])
    b = (torch.randn(3, 8), {"eps": 1e-6}, [torch.ones(3, dtype=torch.int64)])
    assert _key(a) == _key(b)


def test_shape_strides_dtype_and_plain_values_change_the_key():
    x = torch.randn(4, 8)
    base = _key((x, 2))
    assert _key((torch.randn(5, 8), 2)) != base
    assert _key((x.t(), 2)) != base
    assert _key((x.double(), 2)) != base
    assert _key((x, 3)) != base


def test_a_tensor_read_in_place_is_keyed_by_its_address():
    weight = torch.nn.Parameter(torch.randn(8))
    other = torch.nn.Parameter(torch.randn(8))
    x = torch.randn(2, 8)
    assert _key((x, weight)) == _key((torch.randn(2, 8), weight))
    assert _key((x, weight)) != _key((x, other))
    leaves = _Leaves((x, weight), lambda t: isinstance(t, torch.nn.Parameter))
    assert leaves.copied == [x] and leaves.kept == [weight]


def test_a_tensor_met_twice_is_keyed_by_where_it_was_first_met():
    """An impl that returns its input: the same key call after call, another key than two
    distinct tensors."""
    x1, x2 = torch.randn(2, 8), torch.randn(2, 8)
    assert _key((x1, x1)) == _key((x2, x2))
    assert _key((x1, x1)) != _key((x1, torch.randn(2, 8)))
    assert len(_Leaves((x1, x1), lambda t: False).copied) == 1


def test_an_object_is_keyed_by_identity():
    layer, other = torch.nn.Identity(), torch.nn.Identity()
    x = torch.randn(2)
    assert _key((layer, x)) == _key((layer, torch.randn(2)))
    assert _key((layer, x)) != _key((other, x))


def test_substitution_keeps_the_structure_and_what_it_does_not_replace():
    x, w = torch.randn(2), torch.nn.Parameter(torch.randn(2))
    y = torch.randn(2)
    state = (x, [w, {"a": x}], "text")
    out = _substituted(state, {id(x): y})
    assert out[0] is y and out[1][0] is w and out[1][1]["a"] is y and out[2] == "text"

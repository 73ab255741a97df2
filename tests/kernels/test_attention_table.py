"""The tuned decode table of vLLM's Triton attention: how a batch size finds its launch, what the
scratch must hold, bad table files, and the launch ``kernels.attention`` asks vLLM's wrapper for."""

from __future__ import annotations

import logging

import pytest
import torch

from vllm_fl.kernels import attention, attention_table, tuned

TABLE = {1: {"segments": 32}, 8: {"segments": 16}, 32: {"segments": 1}}


@pytest.mark.parametrize(
    "seqs, kv_heads, segments", [(1, 8, 16), (16, 8, 16), (17, 8, 1), (32, 4, 16), (33, 4, 1)]
)
def test_without_a_table_vllms_rule_applies(seqs, kv_heads, segments):
    assert attention_table.segments_for(None, seqs, kv_heads) == segments


@pytest.mark.parametrize(
    "seqs, segments",
    [(1, 32), (4, 32), (5, 16), (20, 16), (21, 1), (32, 1), (33, 1), (4096, 1)],
)
def test_a_batch_takes_the_nearest_tuned_size_and_the_2d_kernel_beyond(seqs, segments):
    # 4: nearer 1 than 8; 20: as near 8 as 32, the smaller wins; above 32: the 2D kernel
    assert attention_table.segments_for(TABLE, seqs, kv_heads=8) == segments


def test_the_scratch_holds_the_largest_3d_batch():
    # batches of 5..20 take 16 segments: 20 x 16 rows; 1..4 take 32: 4 x 32
    assert attention_table.scratch_rows(TABLE, kv_heads=8) == 320
    assert attention_table.scratch_rows(None, kv_heads=8) == 16 * 16
    assert attention_table.scratch_rows({4: {"segments": 1}}, kv_heads=8) == 0


@pytest.mark.parametrize(
    "text, says",
    [
        ('{"1": {"segments": 3}}', "[1].segments = 3; must be a power of two"),
        ('{"1": {"segments": 0}}', "[1].segments = 0; must be a positive integer"),
        ('{"1": {"segments": 8, "num_warps": 4}}', "a config has exactly ['segments']"),
        ('{"one": {"segments": 8}}', "'one' is not a decode batch size"),
        ("{}", "expected an object of decode batch size -> config"),
    ],
)
def test_a_bad_table_names_the_file_key_and_value(tmp_path, text, says):
    path = tmp_path / "t.json"
    with pytest.raises(tuned.TableError) as error:
        tuned.parse_table(path, text, attention_table.SCHEMA)
    assert str(error.value).startswith(str(path)) and says in str(error.value)


def test_an_invalid_table_file_is_ignored_with_a_warning(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(attention_table, "TABLE_DIR", tmp_path)
    attention_table.load_table.cache_clear()
    (tmp_path / "bad.json").write_text('{"1": {"segments": 5}}')
    with caplog.at_level(logging.WARNING):
        assert attention_table.load_table("bad.json") is None
    assert "bad.json" in caplog.text and "paged-attention decode" in caplog.text
    attention_table.load_table.cache_clear()


def test_a_written_table_loads_back(tmp_path, monkeypatch):
    monkeypatch.setattr(attention_table, "TABLE_DIR", tmp_path)
    attention_table.load_table.cache_clear()
    (tmp_path / "t.json").write_text(tuned.table_json(TABLE, attention_table.SCHEMA))
    assert attention_table.load_table("t.json") == TABLE
    attention_table.load_table.cache_clear()


def test_tables_are_looked_up_on_cuda_devices_only():
    assert attention.decode_table(torch.device("cpu"), 32, 8, 128, torch.bfloat16) is None


@pytest.mark.parametrize("seqs, segments", [(3, 32), (12, 16), (24, 1)])
def test_a_decode_batch_asks_vllms_wrapper_for_the_tables_launch(monkeypatch, seqs, segments):
    ops = pytest.importorskip("vllm.v1.attention.ops.triton_unified_attention")
    calls = []
    monkeypatch.setattr(ops, "unified_attention", lambda **kw: calls.append(kw))
    monkeypatch.setattr(attention, "_replaying", False)
    monkeypatch.setattr(attention, "_scratch", {})
    monkeypatch.setattr(attention, "decode_table", lambda *args: TABLE)
    heads, kv_heads, head_size = 4, 2, 8
    key_cache, value_cache = torch.randn(2, 4, 16, kv_heads, head_size).unbind(0)
    attention.unified_attention(
        query=torch.randn(seqs, heads, head_size),
        key_cache=key_cache,
        value_cache=value_cache,
        output=torch.empty(seqs, heads, head_size),
        block_table=torch.zeros(seqs, 4, dtype=torch.int32),
        seq_lens=torch.full((seqs,), 20, dtype=torch.int32),
        query_start_loc=torch.arange(seqs + 1, dtype=torch.int32),
        max_query_len=1,
        max_seq_len=20,
        softmax_scale=0.5,
        causal=True,
        window_left=-1,
        logits_soft_cap=0.0,
        sinks=None,
    )
    (call,) = calls
    if segments == attention_table.TWO_D:
        assert "num_par_softmax_segments" not in call and "seq_threshold_3D" not in call
        return
    assert call["num_par_softmax_segments"] == segments and call["seq_threshold_3D"] == seqs
    # the scratch holds this batch: its rows are laid out by the segment count vLLM is given
    rows = seqs * segments * heads
    assert call["softmax_segm_max"].numel() >= rows
    assert call["softmax_segm_output"].numel() >= rows * head_size

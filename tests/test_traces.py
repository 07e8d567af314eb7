"""Trace lengths: sane rows from a tiny model, batching by prompt length changes nothing, the answer
line is read exactly, and the bootstrap intervals hold their statistic."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

import workbench as wb
from conftest import perturbed_model, small_config
from workbench import tasks
from workbench.analysis.traces import TRACE_COLUMNS, _read_trace, summarize_traces, trace_lengths

VOCAB = tasks.CharTokenizer().vocab_size


@pytest.fixture(scope="module")
def task():
    return tasks.get("arith_cot", steps=2, max_value=20)


@pytest.fixture(scope="module")
def model():
    return perturbed_model(small_config("fbt", vocab_size=VOCAB, seq_len=64), scale=0.05)


def test_trace_lengths_rows_are_sane(model, task):
    model.train()  # decoding runs in eval mode (no FBT jitter) and gives the caller's mode back
    try:
        df = trace_lengths(model, task, n=6, seed=0, max_new_tokens=8, prefill_passes=2)
        assert model.training
    finally:
        model.eval()
    assert list(df.columns) == TRACE_COLUMNS
    assert list(df["regime"]) == [r for r in wb.decode.REGIMES for _ in range(6)]
    assert list(df["example"]) == list(range(6)) * 3
    assert df["length"].between(0, 8).all()
    assert not (df["correct"] & ~df["answered"]).any()
    assert df["answered"].dtype == bool and df["correct"].dtype == bool
    assert all(isinstance(t, str) for t in df["text"])


def test_batching_by_prompt_length_matches_one_prompt_at_a_time(model, task):
    batch = task.sample(6, seed=0, split="val")
    lengths = {len(p) for p in batch.prompts}
    assert len(lengths) > 1  # the grouping is exercised
    df = trace_lengths(model, task, ("soft",), n=6, seed=0, max_new_tokens=8)
    for i, prompt in enumerate(batch.prompts):
        ids = torch.tensor([task.tokenizer.encode(prompt)])
        alone = wb.generate(model, ids, 8, regime="soft")[0, ids.size(1):].tolist()
        assert df["text"][i] == _read_trace(task, alone, int(batch.labels[i]))["text"]


def test_answer_line_is_read_exactly(task):
    def read(text: str, answer: int = 8) -> dict:
        return _read_trace(task, task.tokenizer.encode(text), answer)

    assert read("> 5+3\n#### 8\nQ: 1+1") == {"length": 6, "answered": True, "correct": True, "text": "> 5+3\n#### 8\n"}
    assert read("#### 7\n") == {"length": 0, "answered": True, "correct": False, "text": "#### 7\n"}
    cut = read("> 5+3\n#### 8")  # the budget ran out inside the answer: it might have gone on to 80
    assert cut["length"] == 6 and not cut["answered"] and not cut["correct"]
    none = read("> 5+3\n> 8\n")
    assert none["length"] == len("> 5+3\n> 8\n") and not none["answered"]


def test_bad_input_is_refused(model, task):
    with pytest.raises(ValueError, match="regimes"):
        trace_lengths(model, task, ("greedy",), n=2)
    with pytest.raises(ValueError, match="max_new_tokens"):
        trace_lengths(model, task, n=2, max_new_tokens=0)
    with pytest.raises(ValueError, match="check_answer"):
        trace_lengths(model, tasks.get("delayed_memory"), n=2)


def test_summary_intervals_contain_their_statistic():
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"regime": np.repeat(["standard", "soft"], 50),
                       "length": np.concatenate([rng.integers(10, 40, 50), rng.integers(5, 20, 50)]),
                       "answered": rng.random(100) < 0.9})
    df["correct"] = df["answered"] & (rng.random(100) < 0.6)
    summary = summarize_traces(df, n_boot=500, seed=0)
    assert list(summary["regime"]) == ["standard", "soft"] and (summary["n"] == 50).all()
    for _, row in summary.iterrows():
        assert row["median_length_lo"] <= row["median_length"] <= row["median_length_hi"]
        assert row["accuracy_lo"] <= row["accuracy"] <= row["accuracy_hi"]
        assert row["median_length_lo"] < row["median_length_hi"]
    soft = df[df["regime"] == "soft"]
    assert summary["median_length"][1] == np.median(soft["length"])
    assert summary["answered"][1] == pytest.approx(soft["answered"].mean())
    pd.testing.assert_frame_equal(summary, summarize_traces(df, n_boot=500, seed=0))
    with pytest.raises(ValueError, match="n_boot"):
        summarize_traces(df, n_boot=0)
    with pytest.raises(ValueError, match="correct"):
        summarize_traces(df.drop(columns="correct"))

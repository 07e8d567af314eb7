"""Trace lengths: sane rows from a tiny model, batching by prompt length changes nothing, the answer
line is read exactly, the training mix is read like a decoded trace, and the bootstrap intervals
hold their statistic (the paired hierarchical one on cases with a known answer)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

import workbench as wb
from conftest import perturbed_model, small_config
from workbench import tasks
from workbench.analysis.traces import (
    TRACE_COLUMNS,
    TRAINING,
    compare_regimes,
    first_decisions,
    line_distribution,
    paired_hierarchical_difference,
    read_trace,
    summarize_traces,
    trace_lengths,
    training_traces,
)

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
        assert df["text"][i] == read_trace(task, alone, int(batch.labels[i]))["text"]


def test_answer_line_is_read_exactly(task):
    def read(text: str, answer: int = 8) -> dict:
        return read_trace(task, task.tokenizer.encode(text), answer)

    assert read("> 5+3\n#### 8\nQ: 1+1") == {"length": 6, "lines": 1, "answered": True, "correct": True,
                                              "text": "> 5+3\n#### 8\n"}
    assert read("#### 7\n") == {"length": 0, "lines": 0, "answered": True, "correct": False, "text": "#### 7\n"}
    cut = read("> 5+3\n#### 8")  # the budget ran out inside the answer: it might have gone on to 80
    assert cut["length"] == 6 and not cut["answered"] and not cut["correct"]
    none = read("> 5+3\n> 8\n")
    assert none["length"] == len("> 5+3\n> 8\n") and none["lines"] == 2 and not none["answered"]


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


def test_decoding_stops_at_the_task_end_marker(model, monkeypatch):
    """A task with an end marker hands it to generate (which stops there); one without hands None."""
    import workbench.analysis.traces as traces

    seen = []

    def spy(*args, **kwargs):
        seen.append(kwargs["eos"])
        return wb.generate(*args, **kwargs)

    monkeypatch.setattr(traces, "generate", spy)
    with_eos = tasks.get("arith_cot", steps=2, max_value=20, eos=True)
    df = trace_lengths(model, with_eos, ("standard",), n=4, seed=0, max_new_tokens=8)
    assert set(seen) == {with_eos.eos_id} and with_eos.eos_id == with_eos.tokenizer.encode("$")[0]
    assert df["length"].between(0, 8).all() and list(df.columns) == TRACE_COLUMNS
    seen.clear()
    trace_lengths(model, tasks.get("arith_cot", steps=2, max_value=20), ("standard",), n=4, seed=0, max_new_tokens=8)
    assert set(seen) == {None}


def test_training_traces_follow_the_verbosity_mix():
    """Full / skipped / answer-only a third each: 0, 1, 2 lines with shares 5/12, 1/6, 5/12 for 3 steps."""
    task = tasks.get("arith_cot", steps=3, max_value=19, eos=True)
    train = training_traces(task, n=3000, seed=0)
    assert list(train.columns) == TRACE_COLUMNS and (train["regime"] == TRAINING).all()
    assert train["correct"].all() and train["answered"].all()
    shares = line_distribution(train).query("outcome == 'all'").set_index("lines")["share"]
    np.testing.assert_allclose(shares.to_numpy(), [5 / 12, 1 / 6, 5 / 12], atol=0.03)
    assert (train.loc[train["lines"] == 0, "length"] == 0).all()  # answer-only: the marker comes first


def test_line_distribution_shares_sum_to_one_per_outcome():
    df = pd.DataFrame({"regime": ["a"] * 5 + ["b"] * 3, "lines": [0, 0, 2, 2, 2, 1, 1, 0],
                       "correct": [True, False, True, True, False, True, True, True]})
    table = line_distribution(df)
    assert np.allclose(table.groupby(["regime", "outcome"])["share"].sum(), 1.0)
    a = table[(table["regime"] == "a") & (table["outcome"] == "wrong")].set_index("lines")["count"]
    assert a.to_dict() == {0: 1, 2: 1}
    assert set(table[table["regime"] == "b"]["outcome"]) == {"all", "correct"}  # no wrong trace, no row
    with pytest.raises(ValueError, match="lines"):
        line_distribution(df.drop(columns="lines"))


def test_paired_hierarchical_difference_known_answers():
    rng = np.random.default_rng(0)
    ref = [rng.integers(0, 20, 40).astype(float) for _ in range(3)]
    # a constant shift of every example in every seed: the interval is the shift, for either statistic
    for statistic in ("mean", "median"):
        shifted = paired_hierarchical_difference(ref, [r + 3 for r in ref], statistic, n_boot=300)
        assert shifted == {"mean": 3.0, "low": 3.0, "high": 3.0, "seeds": 3}
    # the seeds differ by a constant per seed (0, 2, 4) and examples not at all: the interval is the
    # bootstrap of three seed means, whose 2.5 % and 97.5 % quantiles are 0 and 4 (each has mass 1/27)
    constant = [np.full(40, 5.0)] * 3
    seeds = paired_hierarchical_difference(constant, [c + d for c, d in zip(constant, (0, 2, 4))], n_boot=4000)
    assert seeds["mean"] == 2.0 and seeds["low"] == 0.0 and seeds["high"] == 4.0
    # the median is the median: half the examples 0 -> 10, the rest stay, per seed median moves accordingly
    base = np.arange(10.0)
    moved = paired_hierarchical_difference([base], [np.where(base < 3, 20.0, base)], "median", n_boot=50)
    assert moved["mean"] == np.median(np.where(base < 3, 20.0, base)) - np.median(base)
    with pytest.raises(ValueError, match="statistic"):
        paired_hierarchical_difference(ref, ref, "mode")
    with pytest.raises(ValueError, match="reference.*arm"):
        paired_hierarchical_difference(ref, ref[:2])


def test_compare_regimes_pairs_runs_and_examples():
    rows = []
    for run, extra in (("s0", 0), ("s1", 2)):
        for regime, shift in (("standard", 0), ("soft", -4)):
            for i in range(30):
                rows.append({"run": run, "regime": regime, "example": i, "length": 10 + i % 3 + shift + extra,
                             "correct": i % 2 == 0})
    table = compare_regimes(pd.DataFrame(rows), n_boot=200).set_index(["regime", "quantity"])
    assert table.loc[("soft", "median_length"), ["diff", "low", "high"]].tolist() == [-4.0, -4.0, -4.0]
    assert table.loc[("soft", "accuracy"), ["diff", "low", "high"]].tolist() == [0.0, 0.0, 0.0]
    assert table.loc[("standard", "median_length"), "value"] == 12.0  # medians 11 and 13, averaged
    assert np.isnan(table.loc[("standard", "accuracy"), "diff"]) and (table["seeds"] == 2).all()
    with pytest.raises(ValueError, match="reference"):
        compare_regimes(pd.DataFrame(rows), reference="fused")


def test_summary_by_run_and_regime():
    df = pd.DataFrame({"run": ["a", "a", "b", "b"], "regime": ["soft"] * 4, "length": [1, 3, 5, 7],
                       "answered": True, "correct": [True, False, True, True]})
    summary = summarize_traces(df, n_boot=20, by=("run", "regime"))
    assert list(summary.columns[:3]) == ["run", "regime", "n"]
    assert summary["median_length"].tolist() == [2.0, 6.0] and summary["accuracy"].tolist() == [0.5, 1.0]


def test_trace_figure_draws_lines_beside_the_training_mix():
    """The third panel: per regime and lines written, correct (solid) stacked under wrong (light)."""
    from workbench import plots

    df = pd.DataFrame({"regime": ["standard"] * 4 + [TRAINING] * 2, "length": [0, 6, 6, 12, 0, 12],
                       "lines": [0, 1, 1, 2, 0, 2], "correct": [True, True, False, True, True, True]})
    fig = plots.trace_lengths(df, line_distribution(df))
    _, ax_acc, ax_lines = fig.axes
    assert [t.get_text() for t in ax_acc.get_xticklabels()] == ["standard"]  # the mix has no accuracy bar
    heights = [p.get_height() for p in ax_lines.patches]
    # standard: correct 1/4, 1/4, 1/4 then wrong 0, 1/4, 0; training mix: correct 1/2, 0, 1/2, wrong 0, 0, 0
    assert heights == pytest.approx([0.25, 0.25, 0.25, 0, 0.25, 0, 0.5, 0, 0.5, 0, 0, 0])
    assert [t.get_text() for t in ax_lines.get_xticklabels()] == ["0", "1", "2"]


def test_trace_explorer_shows_lines_when_recorded():
    from workbench import widgets

    df = pd.DataFrame({"regime": ["standard"], "example": [0], "length": [6], "lines": [1], "answered": [True],
                       "correct": [True], "text": ["> 5+3\n#### 8\n"]})
    assert "length 6 tokens (1 line) before" in widgets.trace_explorer(df).summary.value
    assert "length 6 tokens before" in widgets.trace_explorer(df.drop(columns="lines")).summary.value


def test_arith_cot_end_marker_is_opt_in_and_tight():
    """eos=True ends every text with the marker (one more token in seq_len, loss on it); off, nothing changes."""
    plain = tasks.get("arith_cot", steps=3, max_value=19)
    marked = tasks.get("arith_cot", steps=3, max_value=19, eos=True)
    assert "eos" not in plain.params and plain.eos_id is None and marked.params["eos"] is True
    a, b = plain.sample(64, seed=3, split="val"), marked.sample(64, seed=3, split="val")
    assert [t + "$" for t in a.texts] == b.texts and a.prompts == b.prompts
    assert marked.seq_len == plain.seq_len + 1 and int(b.lengths.max()) <= marked.seq_len
    last = b.lengths - 1  # the marker carries a loss: the model learns to say it is done
    assert (b.targets[torch.arange(64), last - 1] == marked.eos_id).all()
    with pytest.raises(ValueError, match="eos"):
        tasks.get("arith_cot", eos="yes")


def test_soft_makes_standards_first_decision_by_construction(model, task):
    """SOFT prefills the prompt with STANDARD's plain pass, so the first token is STANDARD's to round-off;
    FUSED prefills with feedback and differs. The check the traces rule reads before any verdict."""
    first = first_decisions(model, task, ("standard", "soft", "fused"), n=12, seed=3, prefill_passes=2)
    assert list(first.columns) == ["regime", "example", "first_token", "max_logprob_gap"]
    by = {r: g.reset_index(drop=True) for r, g in first.groupby("regime")}
    assert (by["standard"]["max_logprob_gap"] == 0).all()
    assert by["soft"]["max_logprob_gap"].max() < 1e-9
    assert (by["soft"]["first_token"] == by["standard"]["first_token"]).all()
    assert by["fused"]["max_logprob_gap"].max() > 1e-3


def test_the_traces_rule_refuses_a_design_that_cannot_separate_the_regimes():
    from workbench.experiments.recipes import reasoning_traces as recipe

    shorter = {"mean": -2.0, "low": -3.0, "high": -1.0, "seeds": 3}
    same = {"mean": 0.0, "low": 0.0, "high": 0.0, "seeds": 3}
    fine = {"mean": 0.0, "low": -0.01, "high": 0.01, "seeds": 3}
    assert recipe.decide(shorter, fine, first_gap=0.5) == "reproduces"
    assert recipe.decide(shorter, fine, first_gap=1e-9).startswith(
        "not tested: the design cannot separate the regimes: SOFT's first decision is STANDARD's")
    assert recipe.decide(same, fine, first_gap=0.5) == ("not tested: the design cannot separate the regimes: the "
                                                        "median-length interval has zero width (+0 tokens on every "
                                                        "resample)")
    assert recipe.decide({**shorter, "seeds": 2}, fine, first_gap=1e-9).startswith("not tested: seeds = 2")


def test_soft_started_at_the_prompts_last_token_acts_on_the_first_decision(model, task):
    """``condition("suffix1")`` as a decoding regime fuses the prompt's last token already, so the first token reads
    feedback (the verdict's SOFT in reasoning_traces); the paper's SOFT does not."""
    S = wb.schedules
    first = first_decisions(model, task, {"standard": S.regime("standard"), "soft": S.regime("soft"),
                                          "soft_last": S.condition("suffix1")}, n=12, seed=3)
    by = {r: g.reset_index(drop=True) for r, g in first.groupby("regime")}
    assert by["soft"]["max_logprob_gap"].max() < 1e-9
    assert by["soft_last"]["max_logprob_gap"].max() > 1e-3


def test_regimes_by_label_decode_what_their_schedule_values_decode(model, task):
    """A mapping {label: value} decodes like the named regime of the same value, labelled as given."""
    named = trace_lengths(model, task, ("soft",), n=4, seed=0, max_new_tokens=8)
    labelled = trace_lengths(model, task, {"mine": wb.schedules.regime("soft")}, n=4, seed=0, max_new_tokens=8)
    assert set(labelled["regime"]) == {"mine"}
    pd.testing.assert_frame_equal(named.drop(columns="regime"), labelled.drop(columns="regime"))
    for bad in ("soft", {"x": "soft"}, {}):
        with pytest.raises(ValueError, match="regimes="):
            trace_lengths(model, task, bad, n=2)


def test_trivial_lines_are_read_off_the_question():
    from workbench.experiments.recipes import reasoning_traces as recipe

    task = tasks.get("arith_cot", **recipe.TASK)
    frame = pd.DataFrame({"example": [0, 0, 1], "lines": [0, 3, 1]})
    flags = recipe.written_trivial(frame, task, 2)
    allowed = [sum(not t for t in task.trivial(p)) for p in task.sample(2, seed=recipe.EVAL_SEED, split="val").prompts]
    assert flags.tolist() == [0 > allowed[0], 3 > allowed[0], 1 > allowed[1]] and flags[1]


def test_a_sampled_trace_does_not_depend_on_what_is_decoded_beside_it(model, task):
    """Each example samples from its own generator: a subset of the questions, decoded in other batches, gets the
    very same sampled traces; another seed gets others."""
    whole = trace_lengths(model, task, ("standard", "soft"), n=12, seed=3, max_new_tokens=12, temperature=1.0)
    part = trace_lengths(model, task, ("standard", "soft"), n=5, seed=3, max_new_tokens=12, temperature=1.0)
    merged = part.merge(whole, on=["regime", "example"])
    assert len(merged) == 10 and (merged["text_x"] == merged["text_y"]).all()
    other = trace_lengths(model, task, ("standard",), n=12, seed=4, max_new_tokens=12, temperature=1.0)
    assert other["text"].tolist() != whole[whole["regime"] == "standard"]["text"].tolist()

"""Trace length under SOFT vs STANDARD decoding (FBT paper, arXiv 2608.08888), on a specimen that reasons.

The paper reports that under SOFT decoding base models write shorter reasoning traces (median
length) at equal or better accuracy. A comparison of trace lengths means something only when the
model answers: the specimen is an FBT model trained on an easier ``arith_cot`` (3 chained +/- on
numbers up to ``MAX_VALUE``), gated on held-out STANDARD accuracy, beside a baseline of the same
shape trained on the same data without feedback. Every training trace is correct whatever its
verbosity (full / skipped / answer-only, a third each), and the task ends each text with an
end-of-sequence marker, so how much a model writes before the answer is its free choice and
decoding stops where it says it is done.

The decision rule is ``decide`` below, fixed before any model was trained: the median-length
interval must lie below 0 and the accuracy interval may not lie below STANDARD's by more than
``ACCURACY_MARGIN``. Intervals come from ``analysis.traces.compare_regimes``: a hierarchical
bootstrap over seeds, then examples, paired by both (the regimes decode the same weights on the
same questions).
"""

from __future__ import annotations

import pandas as pd

from ... import tasks
from ...analysis.traces import (
    compare_regimes,
    first_decisions,
    line_distribution,
    summarize_traces,
    trace_lengths,
    training_traces,
)
from ...evaluation import MIN_SEEDS
from ...schedules import Multipass
from ..common import FBT_MIX, SMALL_MODEL, config, describe, steps
from ..core import EVAL_SEED, Context, Finding, Gate, Outcome, Recipe, RunSpec, lead

TASK = {"steps": 3, "max_value": 19, "eos": True}  # easier than the default (3 steps, operands <= 99)
FBT = {**SMALL_MODEL, "mechanism": "fbt"}
BASELINE = {**SMALL_MODEL, "tie_embeddings": True}  # the FBT model's shape without feedback
SEEDS = (0, 1, 2)  # FBT seeds: the regimes are compared on these
BASELINE_SEEDS = (0,)  # context only (no decision rests on it): the training budget goes to the FBT seeds
TRAIN_STEPS = 2000
REGIMES = ("standard", "soft", "fused")
PREFILL_PASSES = 2  # FUSED: fused prefill passes after the plain one (3 in all; training drew up to 3)
N_EXAMPLES = 200  # held-out questions decoded per run and regime at scale 1
COMPETENT = 0.8  # held-out STANDARD accuracy every FBT seed needs
ACCURACY_MARGIN = 0.05  # SOFT may not be worse than STANDARD by more than this (accuracy, absolute)
GATE = "fbt STANDARD accuracy"
SEPARABLE = 1e-6  # first-token log-probabilities of SOFT and STANDARD closer than this: the same first decision


def build(scale: float) -> list[RunSpec]:
    fbt = [RunSpec(f"fbt_s{seed}", config("arith_cot", FBT, steps(TRAIN_STEPS, scale), seed, TASK,
                                           schedule="multipass", pass_mix=FBT_MIX, passes=3, feedback_start=0.3,
                                           prefix_mixin=0.5),
                   Multipass(2)) for seed in SEEDS]
    return fbt + [RunSpec(f"baseline_s{seed}", config("arith_cot", BASELINE, steps(TRAIN_STEPS, scale), seed, TASK))
                  for seed in BASELINE_SEEDS]


def decide(length: dict[str, float], accuracy: dict[str, float], first_gap: float = float("inf")) -> str:
    """The decision rule on SOFT - STANDARD intervals (median trace length in tokens, accuracy), after a check
    that the design can separate the regimes at all.

    not tested, the design cannot separate the regimes: SOFT's first decision is STANDARD's (the
    largest gap ``first_gap`` between their first-token log-probabilities, over every seed and
    problem, is below ``SEPARABLE``: SOFT prefills the prompt as STANDARD does), or the length
    interval has zero width (every resample gives the same median: the regimes write alike);
    reproduces: the length interval lies below 0 and the accuracy interval's low end is at least
    ``-ACCURACY_MARGIN``; does not reproduce: the length interval does not reach below 0 (SOFT is
    not shorter) or the accuracy interval lies below ``-ACCURACY_MARGIN`` (shorter at a cost);
    inconclusive otherwise; not tested with fewer than ``MIN_SEEDS`` seeds.
    """
    if length["seeds"] < MIN_SEEDS:
        return f"not tested: seeds = {length['seeds']} (needs >= {MIN_SEEDS})"
    why = []
    if first_gap < SEPARABLE:
        why.append(f"SOFT's first decision is STANDARD's (their first-token log-probabilities differ by at most "
                   f"{first_gap:.2g})")
    if length["low"] == length["high"]:
        why.append(f"the median-length interval has zero width ({length['low']:+g} tokens on every resample)")
    if why:
        return "not tested: the design cannot separate the regimes: " + "; ".join(why)
    if accuracy["high"] < -ACCURACY_MARGIN or length["low"] >= 0:
        return "does not reproduce"
    if length["high"] < 0 and accuracy["low"] >= -ACCURACY_MARGIN:
        return "reproduces"
    return "inconclusive"


def analyze(ctx: Context) -> Outcome:
    from ...plots import trace_lengths as plot_traces

    task = tasks.get("arith_cot", **TASK)
    n = max(16, int(N_EXAMPLES * min(1.0, ctx.scale)))
    frames, firsts = [], []
    for name, model in ctx.models.items():
        fbt = name.startswith("fbt_")
        frame = trace_lengths(model, task, REGIMES if fbt else ("standard",), n=n, seed=EVAL_SEED,
                              max_new_tokens=task.seq_len, prefill_passes=PREFILL_PASSES)
        frames.append(frame.assign(run=name, arm="fbt" if fbt else "baseline"))
        if fbt:  # can the regimes differ at all? SOFT's first decision against STANDARD's, on the same problems
            firsts.append(first_decisions(model, task, ("standard", "soft"), n=n, seed=EVAL_SEED).assign(run=name))
    traces = pd.concat(frames, ignore_index=True)
    traces.to_csv(ctx.out / "traces.csv", index=False)
    fbt = traces[traces["arm"] == "fbt"]
    table = compare_regimes(fbt)
    shown = pd.concat([fbt, traces[traces["arm"] == "baseline"].assign(regime="baseline"),
                       training_traces(task, n=2000, seed=0)], ignore_index=True)
    lines = line_distribution(shown)
    lines.to_csv(ctx.out / "lines.csv", index=False)
    per_seed = summarize_traces(traces, by=("arm", "run", "regime"))
    per_seed.to_csv(ctx.out / "per_seed.csv", index=False)
    rows = table.set_index(["regime", "quantity"])

    def interval(regime: str, quantity: str) -> dict[str, float]:
        row = rows.loc[(regime, quantity)]
        return {"mean": float(row["diff"]), "low": float(row["low"]), "high": float(row["high"]),
                "seeds": int(row["seeds"])}

    length, accuracy = interval("soft", "median_length"), interval("soft", "accuracy")
    first = pd.concat(firsts, ignore_index=True)
    first.to_csv(ctx.out / "first_decisions.csv", index=False)
    soft_first = first[first["regime"] == "soft"]
    first_gap = float(soft_first["max_logprob_gap"].max())
    same_choice = float((soft_first["first_token"].to_numpy()
                         == first[first["regime"] == "standard"]["first_token"].to_numpy()).mean())
    number = "; ".join([
        describe("median trace soft - standard", length, "tokens"),
        describe("accuracy soft - standard", accuracy, ""),
        describe("median trace fused - standard", interval("fused", "median_length"), "tokens"),
        ", ".join(f"{r} accuracy {rows.loc[(r, 'accuracy'), 'value']:.3f} median "
                  f"{rows.loc[(r, 'median_length'), 'value']:g} tokens" for r in REGIMES),
        f"SOFT's first token: log-probabilities within {first_gap:.2g} of STANDARD's, the same choice on "
        f"{same_choice:.3f} of the problems",
        f"SOFT's accuracy cost (its own finding): {accuracy['mean']:+.3f} [{accuracy['low']:+.3f}, "
        f"{accuracy['high']:+.3f}]"])
    standard = fbt[fbt["regime"] == "standard"].groupby("run")["correct"].mean()
    keep = ["arm", "run", "regime", "n", "accuracy", "median_length", "answered"]
    answers = task.sample(n, seed=EVAL_SEED, split="val").labels
    chance = float(answers.bincount().max()) / len(answers)
    return Outcome(table, plot_traces(shown, lines), number, decide(length, accuracy, first_gap),
                   {GATE: float(standard.min())},
                   chance=f"accuracy {chance:.3f}: always the most frequent held-out answer",
                   extra={"per_seed": per_seed[keep].to_dict("records"), "first_gap": first_gap,
                          "first_same_choice": same_choice, "soft_accuracy": accuracy})


def finding(summary: dict, results: pd.DataFrame) -> Finding:
    """Each regime's median trace and accuracy against STANDARD's, with the intervals the verdict read."""
    rows = results.set_index(["regime", "quantity"])

    def change(regime: str, quantity: str, digits: int) -> str:
        r = rows.loc[(regime, quantity)]
        return f"{r['diff']:+.{digits}f} [{r['low']:+.{digits}f}, {r['high']:+.{digits}f}]"

    base = {q: rows.loc[("standard", q), "value"] for q in ("median_length", "accuracy")}
    costs = rows.loc[("soft", "accuracy"), "high"] < 0
    return Finding(f"median trace {change('soft', 'median_length', 1)} tokens, accuracy "
                   f"{change('soft', 'accuracy', 3)} (SOFT minus STANDARD)",
                   lead(summary) + f" Under SOFT the median trace changes by {change('soft', 'median_length', 1)} "
                   f"tokens from STANDARD's {base['median_length']:g}. A finding of its own: SOFT's accuracy "
                   f"differs from STANDARD's {base['accuracy']:.3f} by {change('soft', 'accuracy', 3)}"
                   + (", a cost (the interval lies below 0)" if costs else "")
                   + f"; FUSED's by {change('fused', 'accuracy', 3)}, with {change('fused', 'median_length', 1)} "
                   "tokens.")


RECIPE = Recipe(
    "reasoning_traces",
    "Under SOFT decoding, base models write shorter reasoning traces (median length) at equal or better accuracy.",
    f"FBT 2x64 (and a no-feedback baseline of the same shape) on arith_cot with 3 steps on numbers <= "
    f"{TASK['max_value']}, an end marker and mixed verbosity (full / skipped / answer-only), {TRAIN_STEPS} steps, "
    f"{len(SEEDS)} FBT seeds ({len(BASELINE_SEEDS)} baseline); greedy decoding of {N_EXAMPLES} held-out problems "
    f"per regime.",
    build, analyze,
    gates=(Gate(GATE, "worst FBT seed's held-out answer accuracy under STANDARD decoding", ">=", COMPETENT),),
    rule=f"First, whether the design can separate the regimes: not tested when SOFT's first-token log-probabilities "
         f"lie within {SEPARABLE:g} of STANDARD's on every problem and seed (the same first verbosity decision by "
         "construction) or the median-length interval has zero width. Then reproduces when the hierarchical 95 % "
         f"interval (seeds, then examples, paired) of SOFT minus STANDARD "
         f"median trace length lies below 0 and the one of SOFT minus STANDARD accuracy does not reach below "
         f"-{ACCURACY_MARGIN}; does not reproduce when the length interval does not reach below 0 or the accuracy "
         f"interval lies below -{ACCURACY_MARGIN}; inconclusive otherwise; not tested with fewer than {MIN_SEEDS} "
         f"seeds or when the gate fails.",
    chance=f"the share of the most frequent answer among the held-out questions (answers lie in "
           f"0..{TASK['max_value']}).",
    caveat="Trace length is tokens before the answer marker. Greedy decoding picks the likeliest verbosity at each "
           "line, so a mix of verbosities in training need not give a mix in decoding: lines.csv and the figure's "
           "third panel set each regime's lines written beside the training mix.",
    paper="Under SOFT decoding, models write shorter reasoning traces at equal or better accuracy", finding=finding)

"""Trace length under SOFT vs STANDARD decoding (FBT paper, arXiv 2608.08888)."""

from __future__ import annotations

import pandas as pd

from ... import tasks
from ...evaluation import hierarchical_difference, verdict
from ..common import FBT_MIX, FBT_MODEL, config, describe, steps
from ..core import EVAL_SEED, Context, Gate, Outcome, Recipe, RunSpec

COMPETENT = 0.8  # held-out STANDARD accuracy the specimen needs
ACCURACY_MARGIN = 0.05  # SOFT may not be worse than STANDARD by more than this


def build(scale: float) -> list[RunSpec]:
    return [RunSpec(f"arith_fbt_s{seed}", config("arith_cot", FBT_MODEL, steps(400, scale), seed,
                                                 schedule="multipass", pass_mix=FBT_MIX, passes=3,
                                                 feedback_start=0.3, prefix_mixin=0.5),
                    {"schedule": "multipass", "passes": 2}) for seed in (0, 1)]


def analyze(ctx: Context) -> Outcome:
    from ...analysis.traces import summarize_traces, trace_lengths
    from ...plots import trace_lengths as plot_traces

    n = max(16, int(200 * min(1.0, ctx.scale)))
    frames = []
    for name, model in ctx.models.items():
        frame = trace_lengths(model, tasks.get("arith_cot"), regimes=("standard", "soft", "fused"), n=n,
                              seed=EVAL_SEED, max_new_tokens=48, prefill_passes=2)
        frame["run"] = name
        frames.append(frame)
    traces = pd.concat(frames, ignore_index=True)
    traces.to_csv(ctx.out / "traces.csv", index=False)
    table = summarize_traces(traces)
    per_run = {run: f.pivot_table(index="example", columns="regime", values=["length", "correct"])
               for run, f in traces.groupby("run")}
    shorter = hierarchical_difference([w[("length", "standard")].to_numpy() for w in per_run.values()],
                                      [w[("length", "soft")].to_numpy() for w in per_run.values()])
    accuracy = hierarchical_difference([w[("correct", "standard")].to_numpy(float) for w in per_run.values()],
                                       [w[("correct", "soft")].to_numpy(float) for w in per_run.values()])
    result = verdict(shorter, -1)
    if result == "reproduces" and accuracy["high"] < -ACCURACY_MARGIN:
        result = "does not reproduce"  # shorter, but at a cost in accuracy
    number = (describe("soft - standard", shorter, "tokens") + "; accuracy "
              + describe("soft - standard", accuracy, ""))
    standard = traces[traces["regime"] == "standard"].groupby("run")["correct"].mean()
    return Outcome(table, plot_traces(traces), number, result,
                   {"arith_fbt STANDARD accuracy": float(standard.min())}, chance="accuracy 0 (no guessing)")


RECIPE = Recipe(
    "reasoning_traces",
    "Under SOFT decoding, base models write shorter reasoning traces (median length) at equal or better accuracy.",
    "FBT 2x64 on arith_cot (3 steps, operands < 100) with mixed verbosity, 400 steps, 2 seeds, greedy decoding "
    "of 200 held-out problems per regime.",
    build, analyze,
    gates=(Gate("arith_fbt STANDARD accuracy", "worst seed's held-out answer accuracy under STANDARD decoding",
                ">=", COMPETENT),),
    rule="reproduces when the hierarchical interval of SOFT minus STANDARD trace length lies below 0 and SOFT's "
         f"accuracy interval does not lie below STANDARD's by more than {ACCURACY_MARGIN}; does not reproduce when "
         "the length interval lies above 0 or accuracy drops by more; inconclusive otherwise; not tested with "
         "fewer than 3 seeds or when the gate fails.",
    chance="answer accuracy 0: answers are integers, not guessed from a small set.")

"""LRT vs baseline at matched training compute (LRT paper, arXiv 2605.26797)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ... import tasks
from ...evaluation import hierarchical_difference, per_example_metrics, verdict
from ..common import (
    EXACT,
    LRT_MODEL,
    RUNNING_SUM,
    SMALL_MODEL,
    arm_mean,
    bar_figure,
    budget_runs,
    combine,
    compare,
    config,
    describe,
    last_quarter_improvement,
    learned_gates_values,
    per_seed,
    running_sum_chance,
)
from ..core import Context, Gate, Outcome, Recipe, RunSpec
from .rules import difference

TEXT = {"seq_len": 64}
UNIGRAM_MARGIN = 0.5  # nats/byte a text baseline must sit below the unigram loss
FLAT = 0.02  # relative loss improvement over the last quarter of training below which a curve has flattened


def build(scale: float) -> list[RunSpec]:
    runs = []
    for task, params, key in (("running_sum", RUNNING_SUM, "state"), ("text", TEXT, "text")):
        for seed in (0, 1):
            runs += budget_runs(f"{key}_", [
                (f"baseline_s{seed}", config(task, SMALL_MODEL, 1, seed, params), EXACT),
                (f"lrt_interleaved_s{seed}", config(task, LRT_MODEL, 1, seed, params, schedule="interleaved",
                                                    subsets=2), EXACT),
            ], 300, scale)
    return runs


def analyze(ctx: Context) -> Outcome:
    tables, words, verdicts = [], [], []
    gates: dict[str, float] = {}
    chance = running_sum_chance(RUNNING_SUM)
    unigram = tasks.get("text", **TEXT).unigram_loss()
    for key, column, lower, unit in (("state", "accuracy", False, "accuracy"), ("text", "loss", True, "nats")):
        arms = {arm: [n for n in ctx.runs if n.startswith(f"{key}_{arm}_")] for arm in ("baseline", "lrt_interleaved")}
        table, intervals = compare(ctx, arms, "baseline", column, lower)
        table.insert(0, "task", "running_sum" if key == "state" else "text (bytes)")
        tables.append(table)
        iv = intervals["lrt_interleaved"]
        # does the LRT model use its memory? the same weights evaluated with no feedback at all
        lrt = arms["lrt_interleaved"]
        without = [per_example_metrics(ctx.models[n], ctx.runs[n].eval_batch())[column].to_numpy() for n in lrt]
        use = hierarchical_difference(without, per_seed(ctx, lrt, column))
        words.append(f"{'running_sum' if key == 'state' else 'text'} " + describe("LRT - baseline", iv, unit)
                     + ", " + describe("LRT exact - same weights without memory", use, unit))
        verdicts.append(verdict(iv, -1 if lower else 1))
        if key == "state":
            gates.update({f"running_sum {k}": v for k, v in learned_gates_values(ctx, arms, chance).items()})
        else:
            gates["text baseline below unigram"] = unigram - arm_mean(ctx, arms["baseline"], "loss")
            gates["text baseline flattened"] = max(
                last_quarter_improvement(pd.read_csv(ctx.out / n / "history.csv")) for n in arms["baseline"])
    table = pd.concat(tables, ignore_index=True)
    figure = bar_figure(table, "LRT vs baseline at matched training FLOPs",
                        {"accuracy": (chance, "chance"), "loss": (unigram, "unigram")})
    return Outcome(table, figure, "; ".join(words), combine(verdicts), gates,
                   chance=f"running_sum chance accuracy {chance:.3f}; text unigram loss {unigram:.3f} nats/byte",
                   extra={"unigram_loss": unigram, "chance_accuracy": float(np.round(chance, 6))})


RECIPE = Recipe(
    "lrt_vs_baseline",
    "LRT (interleaved S=2) beats the baseline at matched training compute: 0.752 vs 0.767 BPB at the nanochat "
    "d20 shape.",
    "2x64 models, 2 seeds, running_sum mod 5 over 32 symbols (per-position accuracy, exact decoding) and stdlib "
    "bytes at context 64 (loss), each arm given the FLOPs of 300 baseline steps.",
    build, analyze,
    gates=(Gate("running_sum baseline learned", "worst seed's exact-decoding accuracy minus the chance floor",
                ">=", 0.10),
           Gate("running_sum lrt_interleaved learned", "worst seed's exact-decoding accuracy minus the chance floor",
                ">=", 0.10),
           Gate("text baseline below unigram", "unigram loss minus the baseline's held-out loss (nats/byte)", ">=",
                UNIGRAM_MARGIN),
           Gate("text baseline flattened", "largest relative training-loss fall over the last quarter of training",
                "<=", FLAT)),
    rule=difference("LRT minus baseline: exact-decoding accuracy on running_sum (higher is better)", True)
    + " On text the same rule applies to LRT minus baseline held-out loss, where lower is better (below 0 "
    "reproduces).",
    chance="running_sum: the accuracy of a predictor without state (the first sum is free, the rest 1 in p); "
           "text: the unigram loss of the held-out bytes.",
    caveat="At matched FLOPs an interleaved run takes half the optimiser steps of the baseline, so at a small "
           "budget the memory must pay for the steps it costs. The second interval shows whether the trained "
           "LRT weights use their memory at all.")

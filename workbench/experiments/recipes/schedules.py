"""Interleaved vs block-wise LRT training (LRT paper, arXiv 2605.26797)."""

from __future__ import annotations

from ...evaluation import verdict
from ..common import (
    EXACT,
    LEARNED_MARGIN,
    LRT_MODEL,
    arms_by_prefix,
    bar_figure,
    budget_runs,
    compare,
    config,
    describe,
    learned_gates_values,
    running_sum_chance,
)
from ..core import Context, Gate, Outcome, Recipe, RunSpec
from .rules import difference

PARAMS = {"p": 5, "length": 16}
ARMS = ("interleaved", "blockwise", "multipass", "sequential")


def build(scale: float) -> list[RunSpec]:
    specs = [(name, config("running_sum", LRT_MODEL, 1, seed, PARAMS, **kw), EXACT)
             for seed in (0, 1)
             for name, kw in ((f"sequential_s{seed}", {"schedule": "sequential"}),
                              (f"interleaved_s{seed}", {"schedule": "interleaved", "subsets": 2}),
                              (f"multipass_s{seed}", {"schedule": "multipass", "passes": 2}),
                              (f"blockwise_s{seed}", {"schedule": "blockwise", "block": 4}))]
    return budget_runs("", specs, 200, scale)


def analyze(ctx: Context) -> Outcome:
    arms = arms_by_prefix(ctx, "{arm}_", ARMS)
    table, intervals = compare(ctx, arms, "blockwise", "accuracy", False)
    chance = running_sum_chance(PARAMS)
    learned = learned_gates_values(ctx, arms, chance)
    iv = intervals["interleaved"]
    return Outcome(table, bar_figure(table, "LRT trained under each schedule, evaluated exactly",
                                     {"accuracy": (chance, "chance")}),
                   describe("interleaved - blockwise", iv, "accuracy") + "; "
                   + "; ".join(describe(f"{a} - blockwise", intervals[a], "accuracy")
                               for a in ("multipass", "sequential")),
                   verdict(iv, 1), {k: learned[k] for k in ("sequential learned", "interleaved learned")},
                   chance=f"chance accuracy {chance:.3f}")


RECIPE = Recipe(
    "schedules",
    "Interleaved training clearly beats block-wise training (the paper's ablation at matched compute).",
    "LRT 2x64 on running_sum mod 5 over 16 symbols under each schedule at matched FLOPs (200 baseline steps), "
    "evaluated exactly, 2 seeds.",
    build, analyze,
    gates=(Gate("sequential learned", "worst seed's exact accuracy minus the chance floor: the task is learnable "
                "by this model and budget", ">=", LEARNED_MARGIN),
           Gate("interleaved learned", "worst seed's exact accuracy minus the chance floor: the claimed better "
                "arm learned the task", ">=", LEARNED_MARGIN)),
    rule=difference("interleaved minus block-wise exact-decoding accuracy", higher_is_better=True),
    chance="the accuracy of a predictor without state (the first sum is free, the rest 1 in p).")

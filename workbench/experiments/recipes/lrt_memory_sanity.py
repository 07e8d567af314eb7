"""A check that the LRT memory works: trained with the exact recurrence, LRT learns a running sum.

No memoryless model beats ``running_sum``'s chance, so an LRT well above it that falls back to it without its memory
shows the memory carries the state."""

from __future__ import annotations

import pandas as pd

from ...evaluation import hierarchical_difference, per_example_metrics
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
    per_seed,
    running_sum_chance,
)
from ..core import Context, Finding, Gate, Outcome, Recipe, RunSpec, lead, preregistered

PARAMS = {"p": 5, "length": 16}


def build(scale: float) -> list[RunSpec]:
    specs = [(f"sequential_s{seed}", config("running_sum", LRT_MODEL, 1, seed, PARAMS, schedule="sequential"), EXACT)
             for seed in (0, 1)]
    return budget_runs("", specs, 200, scale)


def finding(summary: dict, results: pd.DataFrame) -> Finding:
    """The trained accuracy beside the same weights' without memory."""
    row = results.iloc[0]
    return Finding(f"exact accuracy {row['value']:.3f}, {row['accuracy_without_memory']:.3f} without memory",
                   lead(summary) or f"An LRT trained with the exact recurrence answers {row['value']:.3f} of a task "
                   f"that needs its memory, and the same weights with the memory removed answer "
                   f"{row['accuracy_without_memory']:.3f}.")


def takeaway(table: pd.DataFrame) -> str:
    """The arm's accuracy, without its memory, and chance: a single arm has no "best"."""
    row = table.iloc[0]
    return (f"sequential LRT: exact accuracy {row['value']:.3f}, {row['accuracy_without_memory']:.3f} without "
            f"memory (chance {row['floor']:.3f})")


def analyze(ctx: Context) -> Outcome:
    arms = arms_by_prefix(ctx, "{arm}_", ("sequential",))
    names = arms["sequential"]
    chance = running_sum_chance(PARAMS)
    without = [per_example_metrics(ctx.models[n], ctx.runs[n].eval_batch())["accuracy"].to_numpy() for n in names]
    use = hierarchical_difference(without, per_seed(ctx, names, "accuracy"))
    table, _ = compare(ctx, arms, "sequential", "accuracy", False)
    table["accuracy_without_memory"] = [float(sum(w.mean() for w in without) / len(without))]
    verdict = "passes" if use["low"] > 0 else "fails"
    table = table.assign(floor=chance, floor_label="chance")
    return Outcome(table, lambda _: bar_figure(table, takeaway(table)),
                   f"exact accuracy {table['value'].iloc[0]:.4f} (chance {chance:.3f}); "
                   + describe("exact - same weights without memory", use, "accuracy"),
                   verdict, learned_gates_values(ctx, arms, chance), chance=f"chance accuracy {chance:.3f}")


RECIPE = Recipe(
    "lrt_memory_sanity", build=build, analyze=analyze,
    gates=(Gate("sequential learned", "worst seed's exact accuracy minus the chance floor", ">=", LEARNED_MARGIN),),
    kind="sanity", finding=finding, **preregistered("lrt_memory_sanity"))

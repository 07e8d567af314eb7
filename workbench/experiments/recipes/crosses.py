"""Ours, beyond the papers: each mechanism trained under the other's schedule."""

from __future__ import annotations

import pandas as pd

from ...schedules import Interleaved, Multipass
from ..common import (
    EXACT,
    FBT_MODEL,
    LEARNED_MARGIN,
    LRT_MODEL,
    RUNNING_SUM,
    arms_by_prefix,
    bar_figure,
    budget_runs,
    compare,
    config,
    describe,
    learned_gates_values,
    running_sum_chance,
)
from ..core import Context, Gate, Outcome, Recipe, RunSpec, preregistered

PAIRS = (("fbt", "multipass", "interleaved"), ("lrt", "interleaved", "multipass"))  # (mechanism, native, cross)
MODELS = {"fbt": FBT_MODEL, "lrt": LRT_MODEL}
SCHEDULES = {"multipass": Multipass, "interleaved": Interleaved}


def build(scale: float) -> list[RunSpec]:
    """Each mechanism under its native schedule, then the other's."""
    specs = [(f"{mech}_{s}_s{seed}", config("running_sum", MODELS[mech], 1, seed, RUNNING_SUM,
                                            schedule=SCHEDULES[s](2)), EXACT)
             for seed in (0, 1) for mech, *schedules in PAIRS for s in schedules]
    return budget_runs("cross_", specs, 300, scale)


def takeaway(table: pd.DataFrame) -> str:
    """Which mechanism leads under both schedules, with each one's range and chance."""
    value = table.set_index("arm")["value"]
    fbt, lrt = ([float(value[f"{mech}_{s}"]) for s in PAIRS[0][1:]] for mech in ("fbt", "lrt"))
    lead = ("FBT above LRT under both schedules" if min(fbt) > max(lrt) else
            "LRT above FBT under both schedules" if min(lrt) > max(fbt) else "no mechanism leads under both")
    return (f"{lead}: FBT {min(fbt):.3f}-{max(fbt):.3f}, LRT {min(lrt):.3f}-{max(lrt):.3f} "
            f"(chance {table['floor'].iloc[0]:.3f})")


def analyze(ctx: Context) -> Outcome:
    tables, words, gates = [], [], {}
    chance = running_sum_chance(RUNNING_SUM)
    for mech, native, cross in PAIRS:
        arms = arms_by_prefix(ctx, "cross_{arm}_s", (f"{mech}_{native}", f"{mech}_{cross}"))
        table, intervals = compare(ctx, arms, f"{mech}_{native}", "accuracy", False)
        tables.append(table)
        words.append(describe(f"{mech}: {cross} - {native}", intervals[f"{mech}_{cross}"], "accuracy"))
        gates.update({k: v for k, v in learned_gates_values(ctx, arms, chance).items() if native in k})
    table = pd.concat(tables, ignore_index=True).assign(floor=chance, floor_label="chance")
    return Outcome(table, lambda _: bar_figure(table, takeaway(table)),
                   "; ".join(words), "exploratory (no paper claim)", gates, chance=f"chance accuracy {chance:.3f}")


RECIPE = Recipe(
    "crosses", build=build, analyze=analyze,
    gates=tuple(Gate(f"{mech}_{native} learned", "worst seed's exact accuracy minus the chance floor: the "
                     "mechanism learns under its own schedule", ">=", LEARNED_MARGIN) for mech, native, _ in PAIRS),
    kind="exploratory", **preregistered("crosses"))

"""Pass mixes and contraction of the FBT pass map (arXiv 2608.08888), setting 2: an answer needing the carried state.

On ``multi_register`` (appendix F) one layer cannot both move a line's register name onto its value digit and match
on it, so one pass answers only by shortcuts; pass 2 reads the previous position's top state. 8 scratch updates, not
32-256: a 464-token version's pass 2 still lost to pass 1, and ``window(_T)`` passes must fit before the measured
positions."""

from __future__ import annotations

import math

import pandas as pd

from ... import tasks
from ..core import Context, Finding, Outcome, Recipe, lead, preregistered
from ..pass_mix_study import (
    CLAIM,
    FEEDBACK_MIXES,
    PAPER,
    REGISTERS,
    RULE,
    STEPS,
    Setting,
    analyze_mixes,
    gates,
    label_targets,
    registers_runs,
    window,
)

CHANCE = math.log(2)  # the label is one of two values, balanced by construction
CHANCE_MARGIN = 0.35  # nats: a feedback mix's label loss must be at most ln 2 - 0.35 = 0.34


def analyze(ctx: Context) -> Outcome:
    return analyze_mixes(ctx, Setting("registers", label_targets, CHANCE, "chance", CHANCE_MARGIN, FEEDBACK_MIXES,
                                      lambda b: int(b.label_positions.min()) + 1))


_T = tasks.get("multi_register", **REGISTERS).seq_len


def finding(summary: dict, results: pd.DataFrame) -> Finding:
    """The rule's two halves per feedback mix: late-pass loss over pass 2, and how the residual ends."""
    rises = {mix.replace("_", "/"): f"{r['mean']:+.2f} [{r['low']:+.2f}, {r['high']:+.2f}]"
             for mix, r in summary["rises"].items()}
    ends = {mix.replace("_", "/"): " / ".join(sorted(set(g["residual_behaviour"])))
            for mix, g in results[results["mechanism"] == "fbt"].groupby("mix", sort=False)}
    return Finding(f"late-pass loss minus pass 2, nats: {'; '.join(f'{m}: {v}' for m, v in rises.items())}; "
                   f"residual: {', '.join(f'{m} {v}' for m, v in ends.items())}",
                   lead(summary) or f"Iterated for {summary['passes']} passes, FBT's late-pass loss minus its pass-2 "
                   f"loss is {' and '.join(f'{v} nats under {m}' for m, v in rises.items())} (above 0: it rises), "
                   f"and its pass residual {' and '.join(f'{ends[m]} under {m}' for m in rises)}.")


RECIPE = Recipe(
    "fbt_pass_mixes_registers", CLAIM, build=registers_runs, analyze=analyze,
    gates=gates("chance", CHANCE_MARGIN, FEEDBACK_MIXES), rule=RULE, paper=PAPER, finding=finding,
    **preregistered("fbt_pass_mixes_registers", T=_T, STEPS=STEPS, WINDOW=window(_T), LAST=_T - 1))

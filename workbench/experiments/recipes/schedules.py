"""Interleaved vs block-wise LRT training on text (arXiv 2605.26797), at the same FLOPs. Block-wise gives
memory only to each block's first position, so its own-schedule number hides what the exact recurrence shows."""

from __future__ import annotations

import pandas as pd

from ...stats import MIN_SEEDS, verdict
from ..common import compare, describe
from ..core import Context, Finding, Gate, Outcome, Recipe, lead, preregistered
from ..text_arms import (
    ARMS,
    BASE_STEPS,
    BATCH,
    FLAT,
    KNOWN_DIFFERENCES,
    LR_SCHEDULE,
    SEEDS,
    TEXT,
    TREATMENT,
    UNIGRAM_MARGIN,
    arm_runs,
    both_ways,
    flattened,
    outcome_figure,
    prepare,
    text_runs,
    unigram_bpb,
)

SCHEDULE_ARMS = ("lrt_interleaved", "lrt_blockwise")


def analyze(ctx: Context) -> Outcome:
    prepare(ctx)
    arms = arm_runs(ctx, SCHEDULE_ARMS)
    table, intervals = compare(ctx, arms, "lrt_blockwise", "bpb", lower_is_better=True)
    ends, mismatch = both_ways(ctx, arms)
    table["bpb_own_schedule"] = table["arm"].map({a: ends.loc[ends["arm"] == a, "bpb_own_schedule"].mean()
                                                  for a in mismatch})
    iv = intervals["lrt_interleaved"]
    unigram = unigram_bpb()
    number = "; ".join([describe("interleaved - block-wise (exact, final FLOP mark)", iv, "bits/byte")]
                       + [describe(f"{a} own schedule - exact", mismatch[a], "bits/byte") for a in SCHEDULE_ARMS])
    gates = {"interleaved below unigram": unigram - float(table.loc[table["arm"] == "lrt_interleaved",
                                                                    "value"].iloc[0]),
             "interleaved flattened": flattened(ctx, arms["lrt_interleaved"])}
    return Outcome(table, lambda _: outcome_figure(ctx, arms, ends),
                   number, verdict(iv, -1), gates, chance=f"unigram {unigram:.3f} bits/byte on the held-out bytes",
                   extra={"unigram_bpb": unigram, "treatment": TREATMENT, "ends": ends.to_dict("records")})


def finding(summary: dict, results: pd.DataFrame) -> Finding:
    """Each schedule's own number vs the exact recurrence's: where block-wise misleads."""
    arms = results.set_index("arm")
    gap = {arm: arms.loc[arm, "bpb_own_schedule"] - arms.loc[arm, "value"] for arm in ("lrt_interleaved",
                                                                                       "lrt_blockwise")}
    diff = arms.loc["lrt_interleaved", "diff_vs_lrt_blockwise"]
    return Finding(f"{diff:+.3f} bits/byte (interleaved minus block-wise, exact)",
                   lead(summary) or f"Under the exact recurrence interleaved training ends {diff:+.3f} bits/byte "
                   f"from block-wise (below 0: interleaved better), while block-wise's own training schedule reads "
                   f"{gap['lrt_blockwise']:+.3f} from its exact number (interleaved's {gap['lrt_interleaved']:+.3f}).")


PREREGISTERED = preregistered("schedules", TEXT=TEXT, BLOCK=ARMS["lrt_blockwise"][0].block, BASE_STEPS=BASE_STEPS,
                              BATCH=BATCH, LR_SCHEDULE=LR_SCHEDULE, N_SEEDS=len(SEEDS), MIN_SEEDS=MIN_SEEDS,
                              KNOWN_DIFFERENCES=KNOWN_DIFFERENCES)

RECIPE = Recipe(
    "schedules", build=lambda scale: text_runs(SCHEDULE_ARMS, scale), analyze=analyze,
    gates=(Gate("interleaved below unigram", "unigram BPB minus LRT interleaved's held-out BPB (bits/byte, exact)",
                ">=", UNIGRAM_MARGIN),
           Gate("interleaved flattened", "worst seed's relative held-out BPB fall over the last quarter of its "
                "curve", "<=", FLAT)),
    finding=finding, **PREREGISTERED)

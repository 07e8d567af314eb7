"""Interleaved vs block-wise LRT training on text (LRT paper, arXiv 2605.26797), at the same FLOPs.

Block-wise training gives memory only to each block's first position, so its own-schedule number hides what the exact
recurrence (the decision) shows."""

from __future__ import annotations

import pandas as pd

from ...stats import verdict
from ..common import compare, describe, difference
from ..core import Context, Finding, Gate, Outcome, Recipe, lead
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
    return Outcome(table, outcome_figure(ctx, arms, ends),
                   number, verdict(iv, -1), gates, chance=f"unigram {unigram:.3f} bits/byte on the held-out bytes",
                   extra={"unigram_bpb": unigram, "treatment": TREATMENT, "ends": ends.to_dict("records")})


def finding(summary: dict, results: pd.DataFrame) -> Finding:
    """Each schedule's own number against the exact recurrence's: where block-wise training misleads."""
    arms = results.set_index("arm")
    gap = {arm: arms.loc[arm, "bpb_own_schedule"] - arms.loc[arm, "value"] for arm in ("lrt_interleaved",
                                                                                       "lrt_blockwise")}
    diff = arms.loc["lrt_interleaved", "diff_vs_lrt_blockwise"]
    return Finding(f"{diff:+.3f} bits/byte (interleaved minus block-wise, exact)",
                   lead(summary) or f"Under the exact recurrence interleaved training ends {diff:+.3f} bits/byte "
                   f"from block-wise (below 0: interleaved better), while block-wise's own training schedule reads "
                   f"{gap['lrt_blockwise']:+.3f} from its exact number (interleaved's {gap['lrt_interleaved']:+.3f}).")


RECIPE = Recipe(
    "schedules",
    "Interleaved training clearly beats block-wise training (the paper's ablation at matched compute).",
    f"The lrt_vs_baseline text specimens (4x64 bytes, context {TEXT['seq_len']}): LRT trained interleaved S=2 "
    f"vs block-wise (block {ARMS['lrt_blockwise'][0].block}), each at the FLOPs of {BASE_STEPS} baseline "
    f"steps of {BATCH} windows at a {LR_SCHEDULE} learning rate, {len(SEEDS)} seeds, evaluated with the exact "
    "recurrence and under their own schedule.",
    lambda scale: text_runs(SCHEDULE_ARMS, scale), analyze,
    gates=(Gate("interleaved below unigram", "unigram BPB minus LRT interleaved's held-out BPB (bits/byte, exact)",
                ">=", UNIGRAM_MARGIN),
           Gate("interleaved flattened", "worst seed's relative held-out BPB fall over the last quarter of its "
                "curve", "<=", FLAT)),
    rule=difference("LRT interleaved minus LRT block-wise held-out BPB at the final FLOP mark (exact recurrence)",
                    higher_is_better=False),
    chance="the unigram BPB of the held-out bytes (a model without context).",
    caveat="A sequential-training arm (exact recurrence in training) is not run: it costs one forward per byte "
           "of context per step, beyond this budget; the memory check on running_sum is the lrt_memory_sanity "
           "recipe. " + KNOWN_DIFFERENCES,
    paper="Interleaved training clearly beats block-wise at matched compute (the paper's ablation)", finding=finding)

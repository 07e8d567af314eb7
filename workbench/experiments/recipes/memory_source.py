"""Which earlier state the LRT memory carries, on language (LRT paper, arXiv 2605.26797): the previous position's
source state m_{t-1} (the reference LRT) against two positions back (m_{t-2}) and an exponential average of every
earlier position's, all within one forward pass per position, at matched training FLOPs."""

from __future__ import annotations

import pandas as pd

from .. import lrt_ablation
from ..core import Context, Finding, Outcome, Recipe, lead
from ..text_arms import text_runs

ARMS = ("baseline", "lrt_interleaved", "lrt_older", "lrt_pooled")
# arm -> the arm it is read against: the rule's two comparisons, then the reference LRT's gain
COMPARISONS = {"lrt_older": "lrt_interleaved", "lrt_pooled": "lrt_interleaved", "lrt_interleaved": "baseline"}
RULED = ("lrt_older", "lrt_pooled")


decide = lrt_ablation.every_ablation_worse(COMPARISONS, RULED)  # each of RULED worse than its reference


def analyze(ctx: Context) -> Outcome:
    return lrt_ablation.analyze(ctx, COMPARISONS, decide)


def finding(summary: dict, results: pd.DataFrame) -> Finding:
    """m_{t-2} and the pooled average against m_{t-1}, each at matched FLOPs and at equal steps."""
    diffs = results.set_index("arm")["diff"]
    return Finding(f"{diffs['lrt_older']:+.3f} (m_(t-2)) and {diffs['lrt_pooled']:+.3f} (pooled) bits/byte minus "
                   "m_(t-1), matched FLOPs",
                   lead(summary) or "Carrying the state from two positions back, or a pooled average of earlier "
                   "ones, instead of the previous position's changes held-out loss by "
                   f"{lrt_ablation.said(results, 'lrt_older', 'lrt_pooled')}; above 0, the previous position's is "
                   "better.")


RECIPE = Recipe(
    "memory_source", "The previous position's source state m_(t-1) is the best single memory source under the "
    "one-forward-pass constraint.",
    lrt_ablation.setting(ARMS), lambda scale: text_runs(ARMS, scale), analyze, gates=lrt_ablation.GATES,
    rule=lrt_ablation.every_above_rule(tuple(f"{a} minus {COMPARISONS[a]}" for a in RULED)),
    chance="the unigram BPB of the held-out bytes (a model without context).",
    caveat="The paper compares memory sources at the same training, which here is the final FLOP mark: the three "
           "interleaved arms take the same steps. " + lrt_ablation.CAVEAT,
    kind="paper", paper="m_(t-1) is the best single memory source under one forward pass", finding=finding)

"""Which earlier state the LRT memory carries, on language (arXiv 2605.26797): m_{t-1} (the reference LRT)
vs m_{t-2} and an exponential average of all earlier ones, one forward pass per position, at matched FLOPs."""

from __future__ import annotations

from functools import partial

import pandas as pd

from ...stats import MIN_SEEDS
from .. import lrt_ablation
from ..core import Finding, Recipe, lead, preregistered
from ..text_arms import text_runs

ARMS = ("baseline", "lrt_interleaved", "lrt_older", "lrt_pooled")
# arm -> the arm it is read against: the rule's two comparisons, then the reference LRT's gain
COMPARISONS = {"lrt_older": "lrt_interleaved", "lrt_pooled": "lrt_interleaved", "lrt_interleaved": "baseline"}
RULED = ("lrt_older", "lrt_pooled")


decide = lrt_ablation.every_ablation_worse(COMPARISONS, RULED)  # each of RULED worse than its reference


def finding(summary: dict, results: pd.DataFrame) -> Finding:
    """m_{t-2} and the pooled average vs m_{t-1}, at matched FLOPs and equal steps."""
    diffs = results.set_index("arm")["diff"]
    return Finding(f"{diffs['lrt_older']:+.3f} (m_(t-2)) and {diffs['lrt_pooled']:+.3f} (pooled) bits/byte minus "
                   "m_(t-1), matched FLOPs",
                   lead(summary) or "Carrying the state from two positions back, or a pooled average of earlier "
                   "ones, instead of the previous position's changes held-out loss by "
                   f"{lrt_ablation.said(results, 'lrt_older', 'lrt_pooled')}; above 0, the previous position's is "
                   "better.")


RECIPE = Recipe(
    "memory_source", setting=lrt_ablation.setting(ARMS), build=lambda scale: text_runs(ARMS, scale),
    analyze=partial(lrt_ablation.analyze, comparisons=COMPARISONS, rule=decide), gates=lrt_ablation.GATES, kind="paper",
    finding=finding,
    **preregistered("memory_source", MIN_SEEDS=MIN_SEEDS, CAVEAT=lrt_ablation.CAVEAT))

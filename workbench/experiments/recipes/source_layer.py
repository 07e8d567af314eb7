"""Which block feeds the LRT memory, on language (arXiv 2605.26797): the top (reference LRT) vs block 3 of 4
(upper-middle, the paper's choice) and block 1, at matched training FLOPs."""

from __future__ import annotations

from functools import partial

import pandas as pd

from ...stats import MIN_SEEDS, verdict
from .. import lrt_ablation
from ..core import Finding, Recipe, lead, preregistered
from ..lrt_ablation import Intervals
from ..text_arms import text_runs

ARMS = ("baseline", "lrt_interleaved", "lrt_src3", "lrt_src1")
# arm -> the arm it is read against: the rule's comparison first, block 1 beside it, the reference LRT's gain
COMPARISONS = {"lrt_src3": "lrt_interleaved", "lrt_src1": "lrt_interleaved", "lrt_interleaved": "baseline"}


def decide(intervals: Intervals, steps: Intervals) -> str:
    """The rule: lrt_src3 - lrt_interleaved below 0."""
    return verdict(intervals["lrt_src3"], -1)


def finding(summary: dict, results: pd.DataFrame) -> Finding:
    """Block 3 and block 1 vs the top, at matched FLOPs and equal steps."""
    diff = results.set_index("arm").loc["lrt_src3", "diff"]
    return Finding(f"{diff:+.3f} bits/byte (block 3 minus top source, matched FLOPs)",
                   lead(summary) or "Reading the memory from block 3, or block 1, instead of the top changes "
                   f"held-out loss by {lrt_ablation.said(results, 'lrt_src3', 'lrt_src1')}; below 0, the lower block "
                   "is better.")


RECIPE = Recipe(
    "source_layer", setting=lrt_ablation.setting(ARMS), build=lambda scale: text_runs(ARMS, scale),
    analyze=partial(lrt_ablation.analyze, comparisons=COMPARISONS, rule=decide), gates=lrt_ablation.GATES, kind="paper",
    finding=finding,
    **preregistered("source_layer", MIN_SEEDS=MIN_SEEDS, CAVEAT=lrt_ablation.CAVEAT))

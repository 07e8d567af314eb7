"""Where the LRT memory enters each block, on language (arXiv 2605.26797): K/V plus residual injection (the
reference LRT) vs each alone, the baseline as no-injection control, at matched training FLOPs."""

from __future__ import annotations

from functools import partial

import pandas as pd

from ...stats import MIN_SEEDS
from .. import lrt_ablation
from ..core import Finding, Recipe, lead, preregistered
from ..text_arms import text_runs

ARMS = ("baseline", "lrt_interleaved", "lrt_kv_only", "lrt_residual_only")
# arm -> the arm it is read against: the rule's two comparisons, then both paths against no injection at all
COMPARISONS = {"lrt_kv_only": "lrt_interleaved", "lrt_residual_only": "lrt_interleaved",
               "lrt_interleaved": "baseline"}
RULED = ("lrt_kv_only", "lrt_residual_only")


decide = lrt_ablation.every_ablation_worse(COMPARISONS, RULED)  # each of RULED worse than its reference


def finding(summary: dict, results: pd.DataFrame) -> Finding:
    """Each single injection path vs both, at matched FLOPs and equal steps."""
    diffs = results.set_index("arm")["diff"]
    return Finding(f"{diffs['lrt_kv_only']:+.3f} (K/V only) and {diffs['lrt_residual_only']:+.3f} (residual only) "
                   "bits/byte minus both, matched FLOPs",
                   lead(summary) or "Injecting the memory through K/V alone, or the residual alone, instead of both "
                   f"changes held-out loss by {lrt_ablation.said(results, 'lrt_kv_only', 'lrt_residual_only')}; above "
                   "0, both paths together are better.")


RECIPE = Recipe(
    "injection_ablation", setting=lrt_ablation.setting(ARMS), build=lambda scale: text_runs(ARMS, scale),
    analyze=partial(lrt_ablation.analyze, comparisons=COMPARISONS, rule=decide), gates=lrt_ablation.GATES,
    kind="paper", finding=finding,
    **preregistered("injection_ablation", MIN_SEEDS=MIN_SEEDS, CAVEAT=lrt_ablation.CAVEAT))

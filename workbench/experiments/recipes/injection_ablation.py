"""Where the LRT memory enters each block, on language (LRT paper, arXiv 2605.26797): K/V projection and residual
injection together (the reference LRT) against each alone, and the baseline as the no-injection control, at
matched training FLOPs."""

from __future__ import annotations

import pandas as pd

from .. import lrt_ablation
from ..core import Context, Finding, Outcome, Recipe, lead
from ..text_arms import text_runs

ARMS = ("baseline", "lrt_interleaved", "lrt_kv_only", "lrt_residual_only")
# arm -> the arm it is read against: the rule's two comparisons, then both paths against no injection at all
COMPARISONS = {"lrt_kv_only": "lrt_interleaved", "lrt_residual_only": "lrt_interleaved",
               "lrt_interleaved": "baseline"}
RULED = ("lrt_kv_only", "lrt_residual_only")


decide = lrt_ablation.every_ablation_worse(COMPARISONS, RULED)  # each of RULED worse than its reference


def analyze(ctx: Context) -> Outcome:
    return lrt_ablation.analyze(ctx, COMPARISONS, decide)


def finding(summary: dict, results: pd.DataFrame) -> Finding:
    """Each single injection path against both together, at matched FLOPs and at equal steps."""
    diffs = results.set_index("arm")["diff"]
    return Finding(f"{diffs['lrt_kv_only']:+.3f} (K/V only) and {diffs['lrt_residual_only']:+.3f} (residual only) "
                   "bits/byte minus both, matched FLOPs",
                   lead(summary) or "Injecting the memory through K/V alone, or the residual alone, instead of both "
                   f"changes held-out loss by {lrt_ablation.said(results, 'lrt_kv_only', 'lrt_residual_only')}; above "
                   "0, both paths together are better.")


RECIPE = Recipe(
    "injection_ablation", "K/V projection and residual injection are complementary: both together beat either alone.",
    lrt_ablation.setting(ARMS), lambda scale: text_runs(ARMS, scale), analyze, gates=lrt_ablation.GATES,
    rule=lrt_ablation.every_above_rule(tuple(f"{a} minus {COMPARISONS[a]}, both paths" for a in RULED)),
    chance="the unigram BPB of the held-out bytes (a model without context).",
    caveat="The paper compares injection paths at the same training, which here is the final FLOP mark: the three "
           "interleaved arms take the same steps within a few per cent (residual-only's step is a little cheaper). "
           "The baseline is the no-injection control. " + lrt_ablation.CAVEAT,
    kind="paper", paper="K/V projection and residual injection are complementary: both beat either alone",
    finding=finding)

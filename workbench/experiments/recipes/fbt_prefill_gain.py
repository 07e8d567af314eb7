"""Where FUSED's prefill gain arrives (arXiv 2608.08888): mostly with the first extra fused pass. On ``fbt_text``'s
specimens (nothing trained)."""

from __future__ import annotations

import pandas as pd

from .. import fbt_language as lang
from ..common import describe
from ..core import Context, Extension, Finding, Outcome, Recipe, RunSpec, lead, preregistered
from ..fbt_language import PAPER_ARM


def build(scale: float) -> list[RunSpec]:
    """Nothing to train: the specimens are ``fbt_text``'s."""
    return []


def depths(scores: pd.DataFrame) -> list[int]:
    """The prefill depths P scored."""
    return sorted(int(m[5:]) for m in scores["measure"].unique() if m.startswith("fused"))


def gains(scores: pd.DataFrame, arm: str) -> dict[str, dict[str, float]]:
    """The rule's intervals on ``arm``'s weights, gain(P) = STANDARD - FUSED(P)."""
    top = max(depths(scores))
    out = {f"gain{p}": lang.contrast(scores, arm, {"standard": 1.0, f"fused{p}": -1.0}) for p in depths(scores)}
    out["first"] = out["gain1"]
    out["further"] = lang.contrast(scores, arm, {"fused1": 1.0, f"fused{top}": -1.0})
    out["first_minus_further"] = lang.contrast(scores, arm, {"standard": 1.0, "fused1": -2.0, f"fused{top}": 1.0})
    return out


def decide(found: dict[str, dict[str, float]]) -> str:
    """The rule: the first pass gains more than every further pass together."""
    first, margin = found["first"], found["first_minus_further"]
    if first["high"] < 0 or margin["high"] < 0:
        return "does not reproduce: " + ("the first fused pass hurts" if first["high"] < 0 else
                                          "further passes add more than the first")
    if first["low"] > 0 and margin["low"] > 0:
        return "reproduces: the first fused pass gains, and more than every further pass together"
    return "inconclusive"


def gain_figure(results: pd.DataFrame, verdict: str):
    """Per arm, the first fused pass's gain, the further passes', and their difference."""
    return lang.interval_figure(results, {
        "first": "first fused pass: STANDARD - FUSED 1 (above 0: it gains)",
        "further": "further passes: FUSED 1 - FUSED P, the deepest P scored (above 0: they gain)",
        "first_minus_further": "first minus further (above 0: most of the gain comes first)"}, verdict,
        "FUSED's prefill gain (held-out code continuations, 95 % intervals over seeds)")


def analyze(ctx: Context) -> Outcome:
    scores = lang.read_scores(ctx.out.parent)
    gate_values, control = lang.reading_gates(scores)
    top = max(depths(scores))
    rows, extensions = [], []
    for arm in lang.feedback_arms(scores):
        found, used = gains(scores, arm), lang.feedback_used(scores, arm)
        rows.append({"arm": arm, "feedback": used["mean"], "feedback_high": used["high"],
                     **{f"{k}{suffix}": iv[key] for k, iv in found.items()
                        for suffix, key in (("", "mean"), ("_low", "low"), ("_high", "high"))}})
        if arm != PAPER_ARM:
            extensions.append(Extension(
                arm, decide(found) if used["high"] < 0 else "not tested: its feedback is not used (pass 2 - pass 1 "
                                                            "reaches 0)",
                "; ".join([describe(f"{arm} gain of the first pass", found["first"], "bits/byte"),
                           describe(f"{arm} gain of passes 2..{top}", found["further"], "bits/byte"),
                           describe(f"{arm} pass 2 - pass 1", used, "bits/byte")])))
    table = pd.DataFrame(rows)
    paper, used = gains(scores, PAPER_ARM), lang.feedback_used(scores, PAPER_ARM)
    number = "; ".join([describe(f"{PAPER_ARM} gain of the first fused pass (STANDARD - FUSED 1)", paper["first"],
                                 "bits/byte"),
                        describe(f"{PAPER_ARM} gain of passes 2..{top} (FUSED 1 - FUSED {top})", paper["further"],
                                 "bits/byte"),
                        describe(f"{PAPER_ARM} pass 2 - pass 1", used, "bits/byte"),
                        describe("the positive control", control, "bits/byte")])
    return Outcome(table, lambda gated: gain_figure(table, gated), number, decide(paper),
                   gate_values,
                   chance="STANDARD decoding of the same weights (a gain of 0)", extensions=extensions,
                   extra={"positive_control": control, "depths": depths(scores),
                          "next_budget": lang.text_budget(ctx.out.parent)})


def finding(summary: dict, results: pd.DataFrame) -> Finding:
    row = results.set_index("arm").loc[PAPER_ARM]
    return Finding(f"first pass {row['first']:+.3f} bits/byte [{row['first_low']:+.3f}, {row['first_high']:+.3f}]; "
                   f"the rest {row['further']:+.3f}",
                   lead(summary) or f"On the paper's FBT the first extra fused pass over the prompt gains "
                   f"{row['first']:+.3f} bits/byte on held-out code continuations and every further pass together "
                   f"{row['further']:+.3f} (above 0: a gain).")


RECIPE = Recipe(
    "fbt_prefill_gain", build=build, analyze=analyze, gates=lang.READING_GATES, kind="paper", reads=(lang.SPECIMENS,),
    finding=finding,
    **preregistered("fbt_prefill_gain", REGIME_WINDOWS=lang.REGIME_WINDOWS, PROMPT=lang.PROMPT,
                    PREFILL_PASSES=", ".join(map(str, lang.PREFILL_PASSES)), PAPER_ARM=PAPER_ARM))

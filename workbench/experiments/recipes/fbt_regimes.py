"""FBT's decoding regimes on the same weights, on code (arXiv 2608.08888): "SOFT / FUSED beat STANDARD, FUSED
best for code", on ``fbt_text``'s specimens (nothing trained); FUSED runs one extra pass, the training depth."""

from __future__ import annotations

import pandas as pd

from ...files import write_csv
from .. import fbt_language as lang
from ..common import describe
from ..core import Context, Extension, Finding, Outcome, Recipe, RunSpec, lead, preregistered
from ..fbt_language import PAPER_ARM

FUSED = "fused1"  # FUSED at the paper's training depth: one extra fused pass over the prompt
REGIMES = {"soft": "SOFT", FUSED: "FUSED (1 extra pass)"}


def build(scale: float) -> list[RunSpec]:
    """Nothing to train: the specimens are ``fbt_text``'s."""
    return []


def regime_gaps(scores: pd.DataFrame, arm: str) -> dict[str, dict[str, float]]:
    """Each feedback regime minus STANDARD on ``arm``'s weights, bits/byte."""
    return {regime: lang.contrast(scores, arm, {regime: 1.0, "standard": -1.0}) for regime in REGIMES}


def _word(interval: dict[str, float]) -> str:
    return "better" if interval["high"] < 0 else "worse" if interval["low"] > 0 else "indistinguishable"


def decide(gaps: dict[str, dict[str, float]]) -> str:
    """The rule: FUSED vs STANDARD decides, SOFT is read beside it."""
    head = {"better": "reproduces", "worse": "does not reproduce", "indistinguishable": "inconclusive"}
    fused, soft = _word(gaps[FUSED]), _word(gaps["soft"])
    return (f"{head[fused]}: on code FUSED is {fused} and SOFT {soft} (against STANDARD decoding of the same "
            "weights)")


def regimes_figure(results: pd.DataFrame, verdict: str):
    """Each feedback regime minus STANDARD, per arm (below 0: the regime predicts better)."""
    return lang.interval_figure(results, {f"{r}_gap": f"{label} - STANDARD, same weights (below 0: better)"
                                          for r, label in REGIMES.items()}, verdict,
                                "FBT's decoding regimes (held-out code continuations, 95 % intervals over seeds)")


def analyze(ctx: Context) -> Outcome:
    scores = lang.read_scores(ctx.out.parent)
    gate_values, control = lang.reading_gates(scores)
    rows, extensions = [], []
    for arm in lang.feedback_arms(scores):
        gaps, used = regime_gaps(scores, arm), lang.feedback_used(scores, arm)
        means = scores[scores["arm"] == arm].groupby("measure")["bpb"].mean()
        rows.append({"arm": arm, "standard": means["standard"], **{r: means[r] for r in REGIMES},
                     "feedback": used["mean"], "feedback_high": used["high"],
                     **{f"{r}_gap{k}": gaps[r][key] for r in REGIMES for k, key in
                        (("", "mean"), ("_low", "low"), ("_high", "high"))}})
        if arm != PAPER_ARM:
            extensions.append(Extension(
                arm, decide(gaps) if used["high"] < 0 else "not tested: its feedback is not used (pass 2 - pass 1 "
                                                      "reaches 0)",
                "; ".join(describe(f"{arm} {label} - STANDARD", gaps[r], "bits/byte") for r, label in REGIMES.items())
                + "; " + describe(f"{arm} pass 2 - pass 1", used, "bits/byte")))
    table = pd.DataFrame(rows)
    write_csv(ctx.out / "continuations.csv",
              lang.specimen_continuations(ctx.out.parent, lang.feedback_arms(scores)))
    paper = regime_gaps(scores, PAPER_ARM)
    used = lang.feedback_used(scores, PAPER_ARM)
    number = "; ".join([*(describe(f"{PAPER_ARM} {label} - STANDARD", paper[r], "bits/byte")
                          for r, label in REGIMES.items()),
                        describe(f"{PAPER_ARM} pass 2 - pass 1", used, "bits/byte"),
                        describe("the positive control", control, "bits/byte")])
    return Outcome(table, lambda gated: regimes_figure(table, gated), number, decide(paper),
                   gate_values,
                   chance="STANDARD on the same weights (no memory)", extensions=extensions,
                   extra={"positive_control": control, "next_budget": lang.text_budget(ctx.out.parent)})


def finding(summary: dict, results: pd.DataFrame) -> Finding:
    row = results.set_index("arm").loc[PAPER_ARM]
    return Finding(f"FUSED - STANDARD {row[f'{FUSED}_gap']:+.3f} bits/byte [{row[f'{FUSED}_gap_low']:+.3f}, "
                   f"{row[f'{FUSED}_gap_high']:+.3f}]; SOFT {row['soft_gap']:+.3f}",
                   lead(summary) or f"On the paper's FBT's own weights, held-out code continuations cost "
                   f"{row[f'{FUSED}_gap']:+.3f} bits/byte under FUSED and {row['soft_gap']:+.3f} under SOFT against "
                   "STANDARD decoding (below 0: the feedback regime better).")


RECIPE = Recipe(
    "fbt_regimes", build=build, analyze=analyze, gates=lang.READING_GATES, kind="paper", reads=(lang.SPECIMENS,),
    finding=finding,
    **preregistered("fbt_regimes", REGIME_WINDOWS=lang.REGIME_WINDOWS, PROMPT=lang.PROMPT, PAPER_ARM=PAPER_ARM))

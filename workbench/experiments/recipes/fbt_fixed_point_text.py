"""The fixed point on language (ours): does an FBT trained on text read the state its passes converge to?

``fixed_point_study`` found, on a task that needs the feedback, that the paper's GLU converges to a fixed point it
cannot read while an additive fusion trained with random pass counts reads its own. Here the same question on
``fbt_text``'s specimens, from their scores: the exact recurrence (what SOFT decoding and a long FUSED prefill
compute) against pass 2 (the depth they train at), per fusion and training, on the same weights. An arm *reads its
fixed point* when its exact-recurrence bits/byte exceed pass 2's by at most ``READ_TOLERANCE`` (the interval's
upper end); only arms that use their feedback (pass 2 better than pass 1) are read, since an unused feedback
has nothing to read. Nothing is trained.
"""

from __future__ import annotations

import pandas as pd

from .. import fbt_language as lang
from ..common import describe
from ..core import Context, Finding, Outcome, Recipe, RunSpec

READ_TOLERANCE = 0.01  # bits/byte the exact recurrence may cost over pass 2 for an arm to read its fixed point


def build(scale: float) -> list[RunSpec]:
    """Nothing to train: the specimens are ``fbt_text``'s."""
    return []


def fixed_point_rows(scores: pd.DataFrame) -> pd.DataFrame:
    """Per feedback arm: its feedback gate, exact - pass 2 and SOFT - STANDARD on its own weights, with intervals,
    and whether it reads its fixed point."""
    rows = []
    for arm in lang.feedback_arms(scores):
        used = lang.feedback_used(scores, arm)
        cost = lang.contrast(scores, arm, {"exact": 1.0, "pass2": -1.0})
        soft = lang.contrast(scores, arm, {"soft": 1.0, "standard": -1.0})
        rows.append({"arm": arm, "uses_feedback": used["high"] < 0, "feedback": used["mean"],
                     "exact_minus_pass2": cost["mean"], "exact_minus_pass2_low": cost["low"],
                     "exact_minus_pass2_high": cost["high"], "soft_minus_standard": soft["mean"],
                     "soft_minus_standard_low": soft["low"], "soft_minus_standard_high": soft["high"],
                     "reads_fixed_point": bool(used["high"] < 0 and cost["high"] <= READ_TOLERANCE)})
    return pd.DataFrame(rows)


def verdict(table: pd.DataFrame) -> str:
    used = table[table["uses_feedback"]]
    if used.empty:
        return "not tested: no arm uses its feedback"
    readable = used.loc[used["reads_fixed_point"], "arm"].tolist()
    if not readable:
        return "no arm that uses its feedback reads its fixed point"
    return "readable with: " + ", ".join(readable)


def analyze(ctx: Context) -> Outcome:
    table = fixed_point_rows(lang.read_scores(ctx.out.parent))
    number = "; ".join(describe(
        f"{r.arm} exact - pass 2", {"mean": r.exact_minus_pass2, "low": r.exact_minus_pass2_low,
                                    "high": r.exact_minus_pass2_high}, "bits/byte")
        + ("" if r.uses_feedback else " (feedback unused)") for r in table.itertuples())
    long = table.melt(id_vars=["arm"], value_vars=["exact_minus_pass2", "soft_minus_standard"], var_name="metric")
    long["metric"] = long["metric"].map({"exact_minus_pass2": "exact - pass 2, bits/byte",
                                         "soft_minus_standard": "SOFT - STANDARD, bits/byte"})
    figure = lang.bars(ctx, long, "The fixed point on language: what the exact recurrence costs over pass 2")
    return Outcome(table, figure, number, verdict(table), chance="pass 2 of the same weights (the trained depth)")


def finding(summary: dict, results: pd.DataFrame) -> Finding:
    used = results[results["uses_feedback"]]
    worst = results.loc[results["exact_minus_pass2"].idxmax()]
    said = (f"Of the {len(used)} text FBT arms that use their feedback, "
            f"{int(used['reads_fixed_point'].sum())} read their fixed point (the exact recurrence within "
            f"{READ_TOLERANCE} bits/byte of pass 2); the exact recurrence costs {worst['arm']} the most, "
            f"{worst['exact_minus_pass2']:+.3f} bits/byte over its pass 2.")
    return Finding(f"exact - pass 2 up to {worst['exact_minus_pass2']:+.3f} bits/byte ({worst['arm']})", said)


RULE = (f"Per fbt_text arm that uses its feedback (held-out pass 2 - pass 1 below 0, its 95 % interval over windows "
        f"and seeds): it reads its fixed point when the upper end of the interval of exact - pass 2 (same weights) is "
        f"at most {READ_TOLERANCE} bits/byte; the verdict names those that do. An arm whose feedback is unused is "
        "reported, never read.")

RECIPE = Recipe(
    "fbt_fixed_point_text", "(ours) Does a text FBT read the fixed point its passes converge to?",
    f"fbt_text's specimens: held-out bits/byte under the exact recurrence against pass 2 on the same weights, per "
    f"fusion and training, and SOFT - STANDARD on the first {lang.REGIME_WINDOWS} windows' continuations.",
    build, analyze, rule=RULE, chance="pass 2 of the same weights.",
    caveat="Read from scores, not from the pass map itself: the Lyapunov exponent and the lens across passes of "
           "fixed_point_study are not computed on text here.",
    kind="exploratory", reads=(lang.SPECIMENS,), finding=finding)

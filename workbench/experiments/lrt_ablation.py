"""The LRT paper's ablations on language (arXiv 2605.26797), read at the final FLOP mark and at equal steps. A gate
needs the reference LRT to use its memory: ablating an ignored memory says nothing."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import pandas as pd

from ..stats import MIN_SEEDS
from .common import compare, describe
from .core import Context, Gate, Outcome, preregistered
from .recipes import lrt_vs_baseline
from .text_arms import (
    BASE_STEPS,
    BATCH,
    CURVE_MARKS,
    KNOWN_DIFFERENCES,
    LR_SCHEDULE,
    SEEDS,
    TEXT,
    TEXT_MODEL,
    TREATMENT,
    arm_runs,
    both_ways,
    curves,
    flattened,
    outcome_figure,
    prepare,
    unigram_bpb,
)

REFERENCE = "lrt_interleaved"  # the reference LRT: top source, m_{t-1}, K/V and residual injection
UNIT = "bits/byte"

MEMORY_GATE = Gate("reference LRT uses its memory",
                   "upper end of the 95 % hierarchical interval of LRT interleaved's held-out BPB under the exact "
                   "recurrence minus the same weights with no memory (one plain pass), bits/byte", "<", 0.0)
# the baseline's competence checks exactly as lrt_vs_baseline states them, then the memory's
GATES: tuple[Gate, ...] = (*lrt_vs_baseline.RECIPE.gates, MEMORY_GATE)

Intervals = Mapping[str, Mapping[str, float]]  # compared arm -> its difference (an interval, or equal_steps' dict)
Rule = Callable[[Intervals, Intervals], str]  # (final-FLOP-mark intervals, equal-steps differences) -> verdict
COLUMNS = ["arm", "metric", "value", "seed_std", "seeds", "vs", "diff", "ci_low", "ci_high", "equal_steps",
           "diff_equal_steps", "diff_equal_steps_min", "diff_equal_steps_max", "bpb_own_schedule", "better_if"]


def texts(arms: tuple[str, ...] = ()) -> dict[str, str]:
    """The ablation recipes' shared texts; ``setting`` names ``arms``."""
    return preregistered("lrt_ablation", ARMS=", ".join(arms), TEXT_MODEL=TEXT_MODEL, TEXT=TEXT, BASE_STEPS=BASE_STEPS,
                         BATCH=BATCH, LR_SCHEDULE=LR_SCHEDULE, N_SEEDS=len(SEEDS), CURVE_MARKS=CURVE_MARKS,
                         KNOWN_DIFFERENCES=KNOWN_DIFFERENCES)


def setting(arms: tuple[str, ...]) -> str:
    """The recipes' setting."""
    return texts(arms)["setting"]


CAVEAT = texts()["caveat"]


def equal_steps(ctx: Context, arm: list[str], reference: list[str]) -> dict[str, float]:
    """(arm - reference) held-out BPB at the pair's fewer steps, per seed, off the curves."""
    pairs = list(zip(curves(ctx.out, arm), curves(ctx.out, reference), strict=True))
    diffs, missing, marks = [], [], []
    for a, r in pairs:
        mark = min(float(a["step"].iloc[-1]), float(r["step"].iloc[-1]))
        at = float(np.interp(mark, r["step"], r["val_bpb"]))
        diffs.append(float(np.interp(mark, a["step"], a["val_bpb"])) - at)
        missing.append(float(r["val_bpb"].iloc[-1]) - at)
        marks.append(mark)
    return {"steps": float(np.mean(marks)), "arm_steps": float(np.mean([a["step"].iloc[-1] for a, _ in pairs])),
            "reference_steps": float(np.mean([r["step"].iloc[-1] for _, r in pairs])),
            "diff_mean": float(np.mean(diffs)), "diff_min": float(np.min(diffs)), "diff_max": float(np.max(diffs)),
            "missing_steps_mean": float(np.mean(missing)), "seeds": len(diffs)}


def describe_steps(label: str, steps: Mapping[str, float]) -> str:
    """An equal-steps difference in words."""
    further = (f"; the reference's further steps to {steps['reference_steps']:.0f} change it by "
               f"{steps['missing_steps_mean']:+.4f}" if steps["reference_steps"] > steps["steps"] else "")
    return (f"{label} (equal steps, {steps['steps']:.0f}, own-schedule curves): {steps['diff_mean']:+.4f} {UNIT} "
            f"(seeds {steps['diff_min']:+.4f} .. {steps['diff_max']:+.4f}, {steps['seeds']} seeds){further}")


def every_above(intervals: Intervals) -> str:
    """"Each ablation is worse than the reference" on (ablation - reference) intervals."""
    seeds = min(iv.get("seeds", MIN_SEEDS) for iv in intervals.values())
    if seeds < MIN_SEEDS:
        return f"not tested: seeds = {seeds} (needs >= {MIN_SEEDS})"
    below = [f"{label} lies below 0" for label, iv in intervals.items() if iv["high"] < 0]
    if below:
        return "does not reproduce: " + "; ".join(below)
    open_ = [f"{label} contains 0" for label, iv in intervals.items() if iv["low"] <= 0]
    return "inconclusive: " + "; ".join(open_) if open_ else "reproduces"


def every_ablation_worse(comparisons: dict[str, str], ruled: tuple[str, ...]) -> Callable[[Intervals, Intervals], str]:
    """A rule requiring each arm of ``ruled`` worse than its comparison."""
    def decide(intervals: Intervals, steps: Intervals) -> str:
        return every_above({f"{a} - {comparisons[a]}": intervals[a] for a in ruled})

    return decide


def analyze(ctx: Context, comparisons: Mapping[str, str], rule: Rule) -> Outcome:
    """Each arm against its reference both ways; ``rule`` gives the verdict."""
    prepare(ctx)
    arms = arm_runs(ctx, tuple(dict.fromkeys(["baseline", *comparisons.values(), *comparisons])))
    rows, intervals, steps = [], {}, {}
    for arm, names in arms.items():
        vs = comparisons.get(arm)
        table, iv = compare(ctx, {arm: names} if vs is None else {vs: arms[vs], arm: names}, vs or arm, "bpb",
                            lower_is_better=True)
        row = table.set_index("arm").loc[arm].rename({f"diff_vs_{vs}": "diff"}).to_dict()
        if vs is not None:
            intervals[arm], steps[arm] = iv[arm], equal_steps(ctx, names, arms[vs])
            row.update(vs=vs, equal_steps=steps[arm]["steps"], diff_equal_steps=steps[arm]["diff_mean"],
                       diff_equal_steps_min=steps[arm]["diff_min"], diff_equal_steps_max=steps[arm]["diff_max"])
        rows.append({"arm": arm, **row})
    ends, mismatch = both_ways(ctx, arms)
    table = pd.DataFrame(rows, columns=COLUMNS)
    table["bpb_own_schedule"] = table["arm"].map(
        {a: ends.loc[ends["arm"] == a, "bpb_own_schedule"].mean() for a in mismatch})
    use = lrt_vs_baseline.memory_use(ctx, arms[REFERENCE])
    unigram = unigram_bpb()
    number = "; ".join(
        [part for arm, vs in comparisons.items()
         for part in (describe(f"{arm} - {vs} (exact, final FLOP mark)", intervals[arm], UNIT),
                      describe_steps(f"{arm} - {vs}", steps[arm]))]
        + [describe(f"{REFERENCE} exact - same weights without memory (final FLOP mark)", use, UNIT),
           f"LRT trained with the {TREATMENT} treatment"])
    gates = {"baseline below unigram": unigram - float(table.loc[table["arm"] == "baseline", "value"].iloc[0]),
             "baseline flattened": flattened(ctx, arms["baseline"]), MEMORY_GATE.name: use["high"]}
    return Outcome(table, lambda _: outcome_figure(ctx, arms, ends), number, rule(intervals, steps), gates,
                   chance=f"unigram {unigram:.3f} bits/byte on the held-out bytes",
                   extra={"unigram_bpb": unigram, "treatment": TREATMENT, "memory_use": use,
                          "comparisons": {arm: {"vs": vs, "final_flop_mark": intervals[arm],
                                                "equal_steps": steps[arm]} for arm, vs in comparisons.items()},
                          "ends": ends.to_dict("records")})


def said(results: pd.DataFrame, *arms: str) -> str:
    """For a finding: each arm's difference at matched FLOPs, then at equal steps."""
    rows = results.set_index("arm").loc[list(arms)]
    return (" and ".join(f"{r.diff:+.3f} [{r.ci_low:+.3f}, {r.ci_high:+.3f}]" for r in rows.itertuples())
            + f" bits/byte at matched FLOPs ({' and '.join(f'{d:+.3f}' for d in rows['diff_equal_steps'])} at equal "
            "steps)")

"""LRT vs baseline on text at matched training FLOPs (arXiv 2605.26797); its 4x64 byte specimens serve
``schedules`` too. Scored under the exact recurrence and each arm's own schedule, so a train/eval mismatch shows."""

from __future__ import annotations

import pandas as pd

from ... import schedules
from ...evaluation import hierarchical_difference, per_example_metrics
from ...model import build_model, mechanism_overhead
from ...stats import MIN_SEEDS, verdict
from ..common import compare, describe, per_seed
from ..core import Context, Finding, Gate, Outcome, Recipe, lead, preregistered
from ..text_arms import (
    BASE_STEPS,
    BATCH,
    CURVE_MARKS,
    FLAT,
    KNOWN_DIFFERENCES,
    LR_SCHEDULE,
    SEEDS,
    TEXT,
    TREATMENT,
    UNIGRAM_MARGIN,
    add_bpb,
    arm_runs,
    both_ways,
    flattened,
    outcome_figure,
    prepare,
    text_config,
    text_runs,
    unigram_bpb,
)


def equal_steps(ctx: Context, arms: dict[str, list[str]]) -> dict[str, float]:
    """``lrt_ablation.equal_steps`` under this recipe's names: at matched FLOPs the LRT run is the shorter."""
    from ..lrt_ablation import equal_steps as at_equal_steps  # not at the top: lrt_ablation imports this module

    found = at_equal_steps(ctx, arms["lrt_interleaved"], arms["baseline"])
    return {"lrt_steps": found["arm_steps"], "baseline_steps": found["reference_steps"],
            **{k: found[k] for k in ("diff_mean", "diff_min", "diff_max", "missing_steps_mean", "seeds")}}


def memory_use(ctx: Context, names: list[str]) -> dict[str, float]:
    """Exact minus the same weights without memory: below 0 when the model uses its memory."""
    without = [add_bpb(per_example_metrics(ctx.models[n], ctx.runs[n].eval_batch()))["bpb"].to_numpy()
               for n in names]
    return hierarchical_difference(without, per_seed(ctx, names, "bpb"))


def overhead() -> dict[str, float]:
    """LRT's parameter and single-pass FLOP overhead at the text shape."""
    cfg = text_config("lrt_interleaved", 0).model_config(256, TEXT["seq_len"])
    lrt, base = (build_model(c, device="meta") for c in (cfg, cfg.replace(mechanism="none")))
    flops = [schedules.Single().flops(m, BATCH, TEXT["seq_len"]) for m in (lrt, base)]
    return {"param_overhead": mechanism_overhead(cfg)["extra_fraction"], "flop_overhead": flops[0] / flops[1] - 1}


def analyze(ctx: Context) -> Outcome:
    prepare(ctx)
    arms = arm_runs(ctx, ("baseline", "lrt_interleaved"))
    table, intervals = compare(ctx, arms, "baseline", "bpb", lower_is_better=True)
    ends, mismatch = both_ways(ctx, arms)
    own = {arm: ends.loc[ends["arm"] == arm, "bpb_own_schedule"].mean() for arm in mismatch}
    table["bpb_own_schedule"] = table["arm"].map(own)
    iv = intervals["lrt_interleaved"]
    use = memory_use(ctx, arms["lrt_interleaved"])
    cost = overhead()
    unigram = unigram_bpb()
    steps_row = equal_steps(ctx, arms)
    number = "; ".join([
        describe("LRT interleaved - baseline (exact, final FLOP mark)", iv, "bits/byte"),
        f"at equal steps ({steps_row['lrt_steps']:.0f}, from the held-out curves) LRT - baseline "
        f"{steps_row['diff_mean']:+.4f} bits/byte (seeds {steps_row['diff_min']:+.4f} .. "
        f"{steps_row['diff_max']:+.4f}); "
        f"the baseline's further steps to {steps_row['baseline_steps']:.0f} (its share of the matched FLOPs) "
        f"change it by {steps_row['missing_steps_mean']:+.4f}",
        describe("LRT interleaved own schedule - exact", mismatch["lrt_interleaved"], "bits/byte"),
        describe("LRT exact - same weights without memory", use, "bits/byte"),
        f"LRT FLOP overhead {100 * cost['flop_overhead']:.1f} % per single pass",
        f"LRT trained with the {TREATMENT} treatment"])
    gates = {"baseline below unigram": unigram - float(table.loc[table["arm"] == "baseline", "value"].iloc[0]),
             "baseline flattened": flattened(ctx, arms["baseline"])}
    return Outcome(table, lambda _: outcome_figure(ctx, arms, ends),
                   number, verdict(iv, -1), gates, chance=f"unigram {unigram:.3f} bits/byte on the held-out bytes",
                   extra={"unigram_bpb": unigram, "treatment": TREATMENT, **cost, "ends": ends.to_dict("records"),
                          "equal_steps": steps_row})


def finding(summary: dict, results: pd.DataFrame) -> Finding:
    """The matched-FLOP difference beside the equal-steps one."""
    lrt = results.set_index("arm").loc["lrt_interleaved"]
    steps = summary["equal_steps"]
    ours = (f"{lrt['diff_vs_baseline']:+.3f} bits/byte at matched FLOPs; {steps['diff_mean']:+.3f} at equal "
            "steps (LRT minus baseline)")
    return Finding(ours, lead(summary) or f"At matched FLOPs LRT, which gets {steps['lrt_steps']:.0f} optimiser "
                   f"steps to the baseline's {steps['baseline_steps']:.0f}, ends {lrt['diff_vs_baseline']:+.3f} "
                   f"bits/byte from it, and at equal steps {steps['diff_mean']:+.3f} (below 0: LRT better), "
                   + ("so LRT is better per step at this budget." if steps["diff_max"] < 0 else
                      "so LRT is not better per step either at this budget."))


PREREGISTERED = preregistered("lrt_vs_baseline", TEXT=TEXT, BASE_STEPS=BASE_STEPS, BATCH=BATCH,
                              LR_SCHEDULE=LR_SCHEDULE, N_SEEDS=len(SEEDS), CURVE_MARKS=CURVE_MARKS,
                              MIN_SEEDS=MIN_SEEDS, KNOWN_DIFFERENCES=KNOWN_DIFFERENCES)

RECIPE = Recipe(
    "lrt_vs_baseline", build=lambda scale: text_runs(("baseline", "lrt_interleaved"), scale), analyze=analyze,
    gates=(Gate("baseline below unigram", "unigram BPB minus the baseline's held-out BPB (bits/byte, exact)", ">=",
                UNIGRAM_MARGIN),
           Gate("baseline flattened", "worst seed's relative held-out BPB fall over the last quarter of its curve",
                "<=", FLAT)),
    finding=finding, **PREREGISTERED)

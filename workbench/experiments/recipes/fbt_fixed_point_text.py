"""The fixed point on language (ours): does a text FBT read the state its passes converge to?

``fixed_point_study`` found the paper's GLU converging, where feedback is needed, to a fixed point it cannot read. On
``fbt_text``'s scores (nothing trained), an arm that uses its feedback reads it when its exact recurrence costs at most
``READ_TOLERANCE`` bits/byte over pass 2."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch

from ...analysis.jacobians import lyapunov
from ...analysis.lens import fed_back_lens
from ...checkpoint import load_checkpoint
from .. import fbt_language as lang
from ..common import describe
from ..core import Context, Finding, Outcome, Recipe, RunSpec, lead, preregistered
from ..pool import map_jobs
from ..runs import spec_of

READ_TOLERANCE = 0.01  # bits/byte the exact recurrence may cost over pass 2 for an arm to read its fixed point
# Lyapunov windows: about 10 s a run on one core
LYAPUNOV_WINDOWS = 4
LENS_WINDOWS = 64
LENS_PASSES = 3


def build(scale: float) -> list[RunSpec]:
    """Nothing to train: the specimens are ``fbt_text``'s."""
    return []


def fixed_point_rows(scores: pd.DataFrame) -> pd.DataFrame:
    """Per feedback arm: exact - pass 2, SOFT - STANDARD, and whether it reads its fixed point."""
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


def pass_map(run: Path, smoke: bool) -> dict[str, float | str]:
    """One run's top Lyapunov exponent from 3T/4, pass-3 flip share, and pass 2's memory naming the byte."""
    model, batch = load_checkpoint(run), spec_of(run).eval_batch()
    idx, targets = batch.tokens.long(), batch.targets
    T = idx.size(1)
    t0 = T - 9 if smoke else (3 * T) // 4
    exps = lyapunov(model, idx[:1 if smoke else LYAPUNOV_WINDOWS], t0=t0)
    final = exps[exps["horizon"] == exps["horizon"].max()]["exponent"]
    n = min(LENS_WINDOWS, idx.size(0))
    where = torch.full((n,), t0)
    lens = fed_back_lens(model, idx[:n], where, targets[:n, t0], LENS_PASSES)
    memory = lens["lens"].query("lens == 'memory' and `pass` == 2")["top1_is_answer"]
    return {"run": run.name, "lyapunov_top": float(final.mean()),
            "flip_share_pass3": float(lens["flips"].set_index("pass").loc[3, "flip_share"]),
            "memory_top1_pass2": float(memory.iloc[0])}


def pass_maps(ctx: Context, scores: pd.DataFrame) -> pd.DataFrame:
    """``pass_map`` per feedback arm (run mean), with the Lyapunov range."""
    runs = sorted(scores.loc[scores["arm"].isin(lang.feedback_arms(scores)), "run"].unique())
    root = ctx.out.parent / lang.SPECIMENS
    per_run = pd.DataFrame(map_jobs(pass_map, [(root / r, ctx.scale < 1) for r in runs], ctx.jobs,
                                    desc="pass maps"))
    per_run["arm"] = per_run["run"].map(dict(scores[["run", "arm"]].drop_duplicates().itertuples(index=False)))
    by = per_run.groupby("arm")
    return by[["lyapunov_top", "flip_share_pass3", "memory_top1_pass2"]].mean().join(
        by["lyapunov_top"].agg(lyapunov_min="min", lyapunov_max="max")).reset_index()


def verdict(table: pd.DataFrame) -> str:
    used = table[table["uses_feedback"]]
    if used.empty:
        return "not tested: no arm uses its feedback"
    readable = used.loc[used["reads_fixed_point"], "arm"].tolist()
    if not readable:
        return "no arm that uses its feedback reads its fixed point"
    return "readable with: " + ", ".join(readable)


def fixed_point_figure(results: pd.DataFrame, said: str):
    """Per arm, what the exact recurrence costs over pass 2, and SOFT over STANDARD."""
    return lang.interval_figure(results, {
        "exact_minus_pass2": "exact recurrence - pass 2, same weights (near 0: the fixed point is read)",
        "soft_minus_standard": "SOFT - STANDARD decoding, same weights (below 0: feedback helps)"}, said,
        "The fixed point on language (held-out bytes, 95 % intervals over seeds)")


def analyze(ctx: Context) -> Outcome:
    scores = lang.read_scores(ctx.out.parent)
    table = fixed_point_rows(scores).merge(pass_maps(ctx, scores), on="arm", how="left")
    number = "; ".join(describe(
        f"{r.arm} exact - pass 2", {"mean": r.exact_minus_pass2, "low": r.exact_minus_pass2_low,
                                    "high": r.exact_minus_pass2_high}, "bits/byte")
        + ("" if r.uses_feedback else " (feedback unused)") for r in table.itertuples())
    return Outcome(table, lambda gated: fixed_point_figure(table, gated), number, verdict(table),
                   chance="pass 2 of the same weights (the trained depth)")


def finding(summary: dict, results: pd.DataFrame) -> Finding:
    used = results[results["uses_feedback"]]
    worst = results.loc[results["exact_minus_pass2"].idxmax()]
    return Finding(f"exact - pass 2 up to {worst['exact_minus_pass2']:+.3f} bits/byte ({worst['arm']})",
                   lead(summary) or f"{int(used['reads_fixed_point'].sum())} of the {len(used)} text FBT arms that "
                   f"use their feedback read their fixed point (the exact recurrence within {READ_TOLERANCE} "
                   f"bits/byte of pass 2); the exact recurrence costs {worst['arm']} the most, "
                   f"{worst['exact_minus_pass2']:+.3f} bits/byte.")


RECIPE = Recipe(
    "fbt_fixed_point_text", build=build, analyze=analyze, kind="exploratory", reads=(lang.SPECIMENS,), finding=finding,
    **preregistered("fbt_fixed_point_text", REGIME_WINDOWS=lang.REGIME_WINDOWS, LYAPUNOV_WINDOWS=LYAPUNOV_WINDOWS,
                    LENS_PASSES=LENS_PASSES, LENS_WINDOWS=LENS_WINDOWS, READ_TOLERANCE=READ_TOLERANCE))

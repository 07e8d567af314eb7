"""Pass mixes and contraction of the FBT pass map (arXiv 2608.08888), setting 1: byte-level text.

The claim is ``pass_mix_study``'s. A causal Jacobi iteration is exact at t < k after k passes, so only t >= k is
measured. A contraction plot of a model that never used its feedback says nothing: the gates ask pass 2 below pass 1."""

from __future__ import annotations

from typing import Any

from ... import tasks
from ...checkpoint import load_metrics
from .. import fbt_language as lang
from .. import pass_mix_study as study
from ..core import Context, Outcome, Recipe, RunSpec, preregistered
from ..fbt_language import MODEL as TEXT_MODEL
from ..pass_mix_study import CLAIM, MIXES, PAPER, RULE, SEEDS, Setting, analyze_mixes, gates, mix_runs

TEXT = {"seq_len": 512}  # the claim lives at positions past the passes iterated: a long window leaves 128 of them
BATCH = 8  # 4,096 bytes a step, as fbt_text's specimens (16 windows of 256)
STEPS = 1000  # fbt_text's 800-step 2x128 FBTs can use their feedback on this corpus; 25 % feedback batches need more
TEXT_UNIGRAM_MARGIN = 0.3  # nats/byte every text model must sit below the unigram loss at its best pass


# below full scale: the same code paths on a 1x64 model and 128-byte windows
SMOKE_TEXT, SMOKE_MODEL = {"seq_len": 128}, {**TEXT_MODEL, "n_layer": 1, "n_embd": 64}


def build(scale: float) -> list[RunSpec]:
    text, model = (TEXT, TEXT_MODEL) if scale >= 1 else (SMOKE_TEXT, SMOKE_MODEL)
    return mix_runs("mix_", "text", text, STEPS, scale, {m: SEEDS for m in MIXES},
                    model={**model, "mechanism": "fbt"}, batch=BATCH)


# ---------------------------------------------------------------------------------------------- analysis


def text_setting() -> Setting:
    return Setting("text", lambda b: b.targets, tasks.get("text", **TEXT).unigram_loss(), "unigram loss",
                   TEXT_UNIGRAM_MARGIN, tuple(MIXES), lambda b: b.tokens.size(1) // 2, accuracy=False)


def next_budget(ctx: Context) -> dict[str, Any]:
    """Steps giving the feedback mixes the multi-pass batches of fbt_text's longest paper arm (a lower bound),
    and their single-core CPU-hours."""
    fed = lang.STEPS * lang.LONG * (1 - study.FEEDBACK_START)
    # multi-pass batches per step: the plain phase is the same share of both recipes' steps
    share = min(1 - MIXES[m][1] for m in study.FEEDBACK_MIXES) * (1 - study.FEEDBACK_START)
    train = [load_metrics(ctx.out / n)["train"] for n in ctx.runs]
    n_steps = round(fed / share)
    factor = n_steps / next(iter(ctx.runs.values())).train.steps
    return {"need": f"{n_steps:,} steps for every run (as many multi-pass batches as fbt_text's longest paper arm)",
            "cpu_hours": factor * sum(m["cpu_seconds"] for m in train) / 3600}


def analyze(ctx: Context) -> Outcome:
    outcome = analyze_mixes(ctx, text_setting())
    outcome.extra["next_budget"] = next_budget(ctx)
    return outcome


RECIPE = Recipe(
    "fbt_pass_mixes", CLAIM, build=build, analyze=analyze,
    gates=gates("unigram loss", TEXT_UNIGRAM_MARGIN, tuple(MIXES)), rule=RULE, paper=PAPER,
    **preregistered("fbt_pass_mixes", TEXT_MODEL=TEXT_MODEL, TEXT=TEXT, STEPS=STEPS, BATCH=BATCH, N_SEEDS=len(SEEDS)))

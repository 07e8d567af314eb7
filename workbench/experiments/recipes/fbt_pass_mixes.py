"""Pass mixes and contraction of the FBT pass map (FBT paper, arXiv 2608.08888), setting 1: byte-level text.

The claim: trained with 75 % 1-pass / 25 % 2-pass batches, FBT's pass map diverges when iterated past its training
depth; with 75 / 22 / 3 it stays flat for 30 and up to 1,000 fused-prefill passes.

A causal Jacobi iteration is exact after as many passes as a sequence has positions (at pass k every position t < k
holds its exact memory), so every quantity is measured over positions t >= k only (``unsettled_only=True``), for passes
1 .. T - 1: iterating further would only show rounding noise around a fixed point reached by construction. A contraction
plot of a model that never learned to use its feedback says nothing, so the gates require pass 2 below pass 1 and every
model a margin below unigram. ``fbt_pass_mixes_registers`` runs the same analysis where the feedback is needed."""

from __future__ import annotations

from typing import Any

from ... import tasks
from ...checkpoint import load_metrics
from .. import fbt_language as lang
from .. import pass_mix_study as study
from ..core import Context, Outcome, Recipe, RunSpec
from ..fbt_language import MODEL as TEXT_MODEL
from ..pass_mix_study import CLAIM, MIXES, PAPER, RULE, SEEDS, Setting, analyze_mixes, gates, mix_runs

TEXT = {"seq_len": 512}  # the claim lives at positions past the passes iterated: a long window leaves 128 of them
BATCH = 8  # 4,096 bytes a step, as fbt_text's specimens (16 windows of 256)
STEPS = 1000  # fbt_text's 800-step 2x128 FBTs can use their feedback on this corpus; 25 % feedback batches need more
TEXT_UNIGRAM_MARGIN = 0.3  # nats/byte every text model must sit below the unigram loss at its best pass


# below full scale: the same code paths on a 1x64 model and 128-byte windows, not minutes on 512-byte ones
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
    """What would give the feedback mixes a model to read (as many multi-pass batches as fbt_text's longest paper arm, a
    lower bound) and its single-core CPU-hours."""
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
    "fbt_pass_mixes", CLAIM,
    f"FBT {TEXT_MODEL['n_layer']}x{TEXT_MODEL['n_embd']} (GLU fusion, tied embeddings, document starts plain) on "
    f"stdlib bytes at context {TEXT['seq_len']}, progressive schedule (20 % single-pass), jitter, prefix mix-in 0.5, "
    f"{STEPS} steps of {BATCH} sequences, {len(SEEDS)} seeds per mix; the pass map iterated 384 passes on 16 "
    "held-out sequences, measured over positions 384..511.",
    build, analyze, gates=gates("unigram loss", TEXT_UNIGRAM_MARGIN, tuple(MIXES)), rule=RULE,
    chance="the unigram loss of the held-out bytes.",
    caveat="A budget far below the paper's: if the feedback mixes' pass 2 is not better than their pass 1 (the "
           "paper's GLU fusion did not use its feedback on text at fbt_text's size either), the verdict is 'not "
           "tested'. fbt_pass_mixes_registers runs the same analysis where the feedback is needed.",
    paper=PAPER)

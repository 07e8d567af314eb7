"""FBT on language: ``fbt_text``'s specimens scored per held-out window in bits per byte, the decoding regimes on
the continuation."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from .. import schedules, tasks
from ..checkpoint import load_checkpoint
from ..decode import generate
from ..evaluation import per_example_metrics
from ..files import write_csv
from ..model import GPT
from ..stats import bootstrap
from ..tasks import Batch
from ..tasks.text import BOS
from ..validation import fail
from .common import verdict_title
from .core import Context, Gate
from .pool import map_jobs
from .runs import spec_of

# the text specimens' shape: the pilot's, where the pass-2 feedback paid; no memory crosses a <bos>
MODEL = {"n_layer": 2, "n_head": 2, "n_embd": 128, "tie_embeddings": True, "document_token": BOS}
SPECIMENS = "fbt_text"  # the recipe whose runs these recipes read
TEXT = {"seq_len": 256}  # the specimens' task parameters (the standard-library corpus)
STEPS = 800  # fbt_text's optimiser steps of every arm trained at equal steps (LONGS multiply them)
# the paper's arm at LONG times STEPS: at 1x and 3x its feedback was unused, so its verdicts had no model to read; each
# longer multiple was fixed before it trained. The verdicts read the last; the shorter ones are extension rows
LONGS = (3, 9)
LONG = LONGS[-1]
PAPER_ARM = f"glu_mix_x{LONG}"
# the positive control of every text verdict: about twice the tokens against equal steps, a gap the 1.5-2x claim implies
CONTROL = (f"base_mix_flops_x{LONG}", f"base_x{LONG}")
# At 3 seeds the feedback gate ended at +0.0004 with every seed's own pass 2 - pass 1 below 0, and the control's seed
# spread (0.04-0.05 bits/byte, shared by one seed's runs) hid its 0.06 gap from unpaired intervals. Decided before
# seeds 3-5 trained: verdicts read at LONG_SEED_TARGET seeds, paired by seed; LONG_SEEDS: the seeds trained
LONG_SEED_TARGET = 6
LONG_SEEDS = (0, 1, 2, 3, 4, 5)
SCORES = "scores.csv"  # fbt_text's per-run, per-window, per-measure table
PROMPT = 128  # bytes of each 256-byte held-out window given as the prompt; the other 128 are the continuation
PASSES = (1, 2, 3)
PREFILL_PASSES = (1, 2, 4, 16, 64, 256)  # FUSED's extra fused passes over the prompt
SMOKE_PREFILL = (1, 2)  # below full scale (the test suite's smoke runs): FUSED-256 alone costs minutes a model
# windows the regimes' continuations are scored on (FUSED-256: about a minute a model per 64 windows on one core)
REGIME_WINDOWS = 64
GREEDY_PROMPTS = 4  # held-out prompts whose greedy continuations each regime writes (shown, not scored)
GREEDY_TOKENS = 96


def continuation(batch: Batch, prompt_len: int = PROMPT) -> Batch:
    """``batch`` scored on the continuation only."""
    targets = batch.targets.clone()
    targets[:, : prompt_len - 1] = -1
    return dataclasses.replace(batch, targets=targets)


def measures(prefill: tuple[int, ...] = PREFILL_PASSES, feedback: bool = True, prompt_len: int = PROMPT
             ) -> dict[str, tuple[schedules.Schedule, bool]]:
    """Each measure's schedule and whether it scores the continuation only."""
    out: dict[str, tuple[schedules.Schedule, bool]] = {
        f"pass{k}": (schedules.Multipass(k), False) for k in (PASSES if feedback else PASSES[:1])}
    out["exact"] = (schedules.Sequential(), False)
    out["standard"] = (schedules.regime("standard"), True)
    if feedback:
        out["soft"] = (schedules.regime("soft", prompt_len=prompt_len), True)
        out.update({f"fused{p}": (schedules.regime("fused", p, prompt_len), True) for p in prefill})
    return out


def score_run(model: GPT, batch: Batch, prefill: tuple[int, ...] = PREFILL_PASSES,
              regime_windows: int = REGIME_WINDOWS, prompt_len: int = PROMPT) -> pd.DataFrame:
    """Bits per byte per held-out window and measure; continuations on the first ``regime_windows``."""
    if not 1 <= prompt_len < batch.tokens.size(1):
        fail("prompt_len", prompt_len, f"must be in [1, {batch.tokens.size(1) - 1}]")
    if regime_windows < 1:
        fail("regime_windows", regime_windows, "must be >= 1")
    n = min(regime_windows, batch.tokens.size(0))
    scored = continuation(dataclasses.replace(batch, tokens=batch.tokens[:n], targets=batch.targets[:n],
                                              lengths=batch.lengths[:n], groups=batch.groups[:n],
                                              texts=batch.texts[:n]), prompt_len)
    frames = []
    for name, (value, cont) in measures(prefill, model.mechanism.reads, prompt_len).items():
        frame = per_example_metrics(model, scored if cont else batch, value)
        frames.append(pd.DataFrame({"example": frame["example"], "measure": name,
                                    "bpb": frame["loss"] / math.log(2)}))
    return pd.concat(frames, ignore_index=True)


def per_seed(scores: pd.DataFrame, arm: str, measure: str) -> list[np.ndarray]:
    """One per-window array per seed of ``arm`` under ``measure``, both sorted."""
    rows = scores[(scores["arm"] == arm) & (scores["measure"] == measure)]
    return [g.sort_values("example")["bpb"].to_numpy(dtype=np.float64) for _, g in rows.groupby("seed", sort=True)]


def difference(scores: pd.DataFrame, arm: str, measure: str, reference_arm: str, reference_measure: str,
               seed: int = 0) -> dict[str, float]:
    """``arm``'s ``measure`` minus ``reference_arm``'s, paired by window and seed."""
    sides = [dict(zip(sorted(set(scores.loc[scores["arm"] == a, "seed"])), per_seed(scores, a, m), strict=True))
             for a, m in ((arm, measure), (reference_arm, reference_measure))]
    if sides[0].keys() != sides[1].keys():
        raise ValueError(f"arm={arm!r} has seeds {sorted(sides[0])} and reference_arm={reference_arm!r} "
                         f"{sorted(sides[1])}: must be the same")
    return bootstrap([sides[0][s] - sides[1][s] for s in sides[0]], unit="seeds", seed=seed)


def contrast(scores: pd.DataFrame, arm: str, weights: dict[str, float], seed: int = 0) -> dict[str, float]:
    """Interval of ``sum(weight * measure)`` per window, seeds resampled whole."""
    parts = [[w * a for a in per_seed(scores, arm, m)] for m, w in weights.items()]
    combined = [np.sum(same_seed, axis=0) for same_seed in zip(*parts, strict=True)]
    return bootstrap(combined, unit="seeds", seed=seed)


def feedback_used(scores: pd.DataFrame, arm: str) -> dict[str, float]:
    """Pass 2 minus pass 1 on the same weights (below 0: the feedback pays)."""
    return contrast(scores, arm, {"pass2": 1.0, "pass1": -1.0})


def feedback_arms(scores: pd.DataFrame) -> list[str]:
    """The arms with a pass-2 measure."""
    return list(dict.fromkeys(scores.loc[scores["measure"] == "pass2", "arm"]))


SEED_GATE = Gate("pre-registered seeds trained", f"seeds of {PAPER_ARM} and both its baselines, each scored (the "
                 "number decided before seeds 3-5 trained)", ">=", LONG_SEED_TARGET)


def seeds_trained(scores: pd.DataFrame) -> int:
    """``SEED_GATE``'s value."""
    return min(scores.loc[scores["arm"] == arm, "seed"].nunique() for arm in (PAPER_ARM, *CONTROL))


# the gates of every recipe that reads the regimes' continuations (fbt_regimes, fbt_prefill_gain)
READING_GATES = (
    SEED_GATE,
    Gate(f"{PAPER_ARM} uses its feedback", f"upper end of the 95 % interval of {PAPER_ARM}'s held-out pass-2 minus "
         "pass-1 bits/byte, same weights (seeds kept whole)", "<", 0.0),
    Gate("instrument detects the claimed effect", f"upper end of the interval of {CONTROL[0]} - {CONTROL[1]} under "
         "STANDARD on the scored continuations", "<", 0.0),
)


def reading_gates(scores: pd.DataFrame) -> tuple[dict[str, float], dict[str, float]]:
    """``READING_GATES``' values, and the positive control's interval."""
    control = difference(scores, CONTROL[0], "standard", CONTROL[1], "standard", seed=2)  # on the continuations
    return {SEED_GATE.name: seeds_trained(scores), READING_GATES[1].name: feedback_used(scores, PAPER_ARM)["high"],
            READING_GATES[2].name: control["high"]}, control


def text_budget(root: Path) -> dict[str, Any]:
    """``fbt_text``'s ``next_budget`` under a checkpoint root."""
    return json.loads((root / SPECIMENS / "summary.json").read_text())["next_budget"]


def weights_id(run: Path) -> str:
    """A saved run's weights' sha256: a score is reused only for the weights it measured."""
    return json.loads((run / "manifest.json").read_text())["files"]["model.safetensors"]["sha256"]


def _score_saved(run: Path, prefill: tuple[int, ...]) -> pd.DataFrame:
    spec = spec_of(run)
    return score_run(load_checkpoint(run), spec.eval_batch(), prefill).assign(
        run=run.name, seed=spec.train.seed, weights=weights_id(run))


def collect_scores(ctx: Context, arm_of) -> pd.DataFrame:
    """Every run's ``score_run`` table, reused where the weights are unchanged."""
    prefill = PREFILL_PASSES if ctx.scale >= 1 else SMOKE_PREFILL
    path = ctx.out / SCORES
    current = {n: weights_id(ctx.out / n) for n in ctx.runs}
    old = pd.read_csv(path) if path.is_file() else pd.DataFrame(columns=["run", "weights", "measure"])
    want = {f"fused{p}" for p in prefill}
    keep = old[old["run"].map(current).eq(old["weights"])]
    done = {r for r, g in keep.groupby("run") if want <= set(g["measure"]) or not set(g["measure"]) - {
        "pass1", "exact", "standard"}}
    keep = keep[keep["run"].isin(done)]
    todo = [(ctx.out / n, prefill) for n in ctx.runs if n not in done]
    scores = pd.concat([keep.drop(columns="arm", errors="ignore"),
                        *map_jobs(_score_saved, todo, ctx.jobs, desc="fbt_text scores")], ignore_index=True)
    scores = scores[scores["run"].isin(ctx.runs)]
    scores.insert(1, "arm", scores["run"].map(arm_of))
    write_csv(path, scores)
    return scores


def unigram_bpb() -> float:
    """Bits per held-out byte without context: the line every text specimen must clear."""
    return tasks.get("text", **TEXT).unigram_loss() / math.log(2)


def interval_figure(results: pd.DataFrame, panels: Mapping[str, str], verdict: str, setup: str):
    """A reading recipe's figure: each arm's interval per column of ``panels``, from results.csv alone, so a redraw
    draws the same."""
    rows = [{"panel": title, "label": r["arm"], "mean": r[column], "low": r[f"{column}_low"],
             "high": r[f"{column}_high"], "highlight": r["arm"] == PAPER_ARM}
            for column, title in panels.items() for _, r in results.iterrows()]
    return titled_intervals(pd.DataFrame(rows).dropna(subset=["mean", "low", "high"]), verdict, setup)


def titled_intervals(intervals: pd.DataFrame, verdict: str, setup: str):
    """Every text recipe's intervals, titled by the (gated) verdict over the setup."""
    from ..plots import difference_intervals

    return difference_intervals(intervals, f"{verdict_title(verdict)}\n{setup}", "bits/byte")


def specimen_continuations(root: Path, arms: list[str]) -> pd.DataFrame:
    """``greedy_continuations`` of each arm's seed-0 specimen."""
    frames = []
    for arm in arms:
        run = root / SPECIMENS / f"{arm}_s0"
        spec = spec_of(run)
        frames.append(greedy_continuations(load_checkpoint(run), spec.eval_batch(),
                                           spec.eval_task().tokenizer.decode).assign(arm=arm, run=run.name))
    return pd.concat(frames, ignore_index=True)


def read_scores(root: Path) -> pd.DataFrame:
    """``fbt_text``'s scores under a checkpoint root."""
    path = root / SPECIMENS / SCORES
    if not path.is_file():
        raise FileNotFoundError(f"no {SCORES} under {path.parent}: run 'python -m workbench reproduce {SPECIMENS}'")
    return pd.read_csv(path)


@torch.no_grad()
def greedy_continuations(model: GPT, batch: Batch, decode) -> pd.DataFrame:
    """Each regime's greedy continuation of the first ``GREEDY_PROMPTS`` prompts."""
    prompts = batch.tokens[:GREEDY_PROMPTS, :PROMPT]
    rows = []
    for name in schedules.REGIMES:
        out = generate(model, prompts, GREEDY_TOKENS, regime=name, prefill_passes=1)
        rows += [{"example": i, "regime": name, "prompt": decode(prompts[i].tolist()),
                  "continuation": decode(out[i, PROMPT:].tolist())} for i in range(len(prompts))]
    return pd.DataFrame(rows)

"""The byte-level text arms the LRT recipes and ``causal_use`` share, trained at matched compute."""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.lines import Line2D

from .. import tasks
from ..evaluation import hierarchical_difference, per_example_metrics
from ..plots import ends_title, loss_vs_flops
from ..schedules import Blockwise, Interleaved, Schedule, Single
from ..train import TrainConfig
from ..validation import fail
from .common import EXACT, arm_colour, budget_runs, curve_every, last_quarter_improvement, per_seed
from .core import Context, RunSpec, preregistered
from .store import EVAL_FILE

TEXT = {"seq_len": 128}

TEXT_MODEL = {"n_layer": 4, "n_head": 4, "n_embd": 64}

# (ModelConfig fields, TrainConfig fields) of the LRT arms: the mechanism's training treatment
TREATMENTS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "reference": ({"lrt_gamma_init": 0.1, "lrt_kv_init": "uniform"}, {"lrt_gamma_lr": 0.5, "lrt_alpha_lr": 0.005}),
    "workbench": ({"lrt_gamma_init": 0.1, "lrt_kv_init": "zero"}, {}),
}

TREATMENT = "reference"

# each LRT arm: (its training schedule, its changes to the LRT model)
ARMS: dict[str, tuple[Schedule, dict[str, Any]]] = {
    "lrt_interleaved": (Interleaved(2), {}),
    "lrt_blockwise": (Blockwise(32), {}),
    # the LRT paper's ablations, each one change to lrt_interleaved (the top source, m_{t-1}, K/V and residual):
    # the source block (of 4: "src3" is block 3, upper-middle; "src1" block 1), ...
    "lrt_src3": (Interleaved(2), {"lrt_source_layer": 2}),
    "lrt_src1": (Interleaved(2), {"lrt_source_layer": 0}),
    # ... the memory source (m_{t-2}; a pooled average of the earlier positions), ...
    "lrt_older": (Interleaved(2), {"lrt_memory": "older"}),
    "lrt_pooled": (Interleaved(2), {"lrt_memory": "pooled"}),
    # ... the injection path, ...
    "lrt_kv_only": (Interleaved(2), {"lrt_inject": ("kv",)}),
    "lrt_residual_only": (Interleaved(2), {"lrt_inject": ("residual",)}),
    # ... and the gates and layer scales with no memory (the baseline's schedule: nothing recurs)
    "gates_only": (Single(), {"lrt_memory": "none"}),
}

SEEDS = (0, 1, 2)

BASE_STEPS = 1500  # the budget: this many single-pass baseline steps of batch BATCH

# Constant, not warmup-stable-decay: the final decay alone lowers held-out BPB by about 5 %, so a decayed curve's last
# quarter never reads as flat (trial baselines fell 0.049-0.062; at a constant rate 0.013-0.022). Every arm alike.
LR_SCHEDULE = "constant"

BATCH = 16

CURVE_MARKS = 16  # held-out evaluations per run, at regular steps (so at regular FLOP marks)

CURVE_EVAL_SIZE = 64  # held-out windows per curve point

UNIGRAM_MARGIN = 1.0  # bits/byte the baseline must end below the unigram BPB

FLAT = 0.05  # largest relative held-out BPB fall over the last quarter of the curve for "flattened"

KNOWN_DIFFERENCES = preregistered("text_arms")["caveat"]


def text_config(arm: str, seed: int) -> TrainConfig:
    """One text run's config (the LRT arms under ``TREATMENT``); the budget sets its steps later."""
    common = dict(task="text", task_params=dict(TEXT), steps=1, seed=seed, batch_size=BATCH, progress=False,
                  log_every=10, eval_size=CURVE_EVAL_SIZE, lr_schedule=LR_SCHEDULE)
    if arm == "baseline":
        return TrainConfig(model=dict(TEXT_MODEL), **common)
    if arm not in ARMS:
        fail("arm", arm, f"must be 'baseline' or one of {sorted(ARMS)}")
    schedule, changes = ARMS[arm]
    model = {**TEXT_MODEL, "mechanism": "lrt", **TREATMENTS[TREATMENT][0], **changes}
    # a scale the arm's model does not have gets no learning rate of its own
    scales = {k: v for k, v in TREATMENTS[TREATMENT][1].items()
              if "residual" in model.get("lrt_inject", ("residual",))
              and (k != "lrt_gamma_lr" or model.get("lrt_memory") != "none")}
    return TrainConfig(model=model, schedule=schedule, **scales, **common)


def text_runs(arms: tuple[str, ...], scale: float) -> list[RunSpec]:
    """Runs at ``BASE_STEPS`` baseline steps' FLOPs, named alike in every recipe so they are shared."""
    specs = [(f"{arm}_s{seed}", text_config(arm, seed), EXACT) for seed in SEEDS for arm in arms]
    runs = budget_runs("text_", specs, BASE_STEPS, scale, reference=text_config("baseline", 0))
    for run in runs:
        run.train = run.train.replace(eval_every=curve_every(run.train.steps, CURVE_MARKS))
    return runs


def arm_runs(ctx: Context, arms: tuple[str, ...]) -> dict[str, list[str]]:
    return {arm: sorted(n for n in ctx.runs if n.startswith(f"text_{arm}_s")) for arm in arms}


def add_bpb(frame: pd.DataFrame) -> pd.DataFrame:
    """Add per-example ``bpb`` (one token is one byte)."""
    frame["bpb"] = frame["loss"] / math.log(2)
    return frame


def unigram_bpb() -> float:
    return tasks.get("text", **TEXT).unigram_loss() / math.log(2)


def curves(out: Path, names: list[str]) -> list[pd.DataFrame]:
    """Each run's held-out curve: its history rows with a ``val_bpb``."""
    return [pd.read_csv(out / n / "history.csv").dropna(subset=["val_bpb"]) for n in names]


def flattened(ctx: Context, names: list[str]) -> float:
    """The worst seed's ``last_quarter_improvement`` of held-out BPB."""
    return max(last_quarter_improvement(c, "val_bpb") for c in curves(ctx.out, names))


def both_ways(ctx: Context, arms: dict[str, list[str]]) -> tuple[pd.DataFrame, dict[str, dict[str, float]]]:
    """Each LRT arm under its own schedule beside the exact recurrence: the train/eval mismatch."""
    rows, mismatch = [], {}
    for arm, names in arms.items():
        if not arm.startswith("lrt"):
            continue
        own = [add_bpb(per_example_metrics(ctx.models[n], ctx.runs[n].eval_batch(), ctx.runs[n].train.schedule))
               ["bpb"].to_numpy() for n in names]
        exact = per_seed(ctx, names, "bpb")
        mismatch[arm] = hierarchical_difference(exact, own)
        for n, o, e in zip(names, own, exact):
            rows.append({"arm": arm, "run": n, "bpb_exact": float(e.mean()), "bpb_own_schedule": float(o.mean())})
    return pd.DataFrame(rows), mismatch


def end_points(per_example: Mapping[str, pd.DataFrame], arms: Mapping[str, list[str]], ends: pd.DataFrame
               ) -> pd.DataFrame:
    """Per run: final held-out BPB, exact and under its own schedule (else NaN)."""
    own = dict(zip(ends["run"], ends["bpb_own_schedule"])) if len(ends) else {}
    return pd.DataFrame([{"arm": arm, "run": n, "exact": float(per_example[n]["bpb"].mean()),
                          "own": own.get(n, math.nan)} for arm, names in arms.items() for n in names])


def text_title(points: pd.DataFrame) -> str:
    """Which arm ends lowest under the exact recurrence (the decision's numbers)."""
    seeds = {arm: [pd.DataFrame({"bpb": [v]}) for v in rows["exact"]]
             for arm, rows in points.groupby("arm", sort=False)}
    return ends_title(seeds, "bpb", lead="exact recurrence: ")


def text_figure(curves: Mapping[str, list[pd.DataFrame]], points: pd.DataFrame, unigram: float, title: str):
    """Held-out BPB against training FLOPs, and each run's end points."""
    figure = loss_vs_flops(curves, floor=unigram, title=textwrap.fill(title, 110), extra_panel=True)
    lines, ax = figure.axes[0], figure.axes[1]
    bands = iter(lines.collections)  # a band per arm of several seeds, in the curves' order
    for arm, seeds in curves.items():
        for line in lines.get_lines():
            if line.get_label().startswith(f"{arm} ("):
                line.set_color(arm_colour(arm))
        if len(seeds) > 1:
            next(bands).set_color(arm_colour(arm))
    lines.legend(fontsize=8)  # drawn again: a legend keeps the colours its artists had
    lines.set_title("curves: each run's own schedule")
    arms = list(dict.fromkeys(points["arm"]))
    for i, arm in enumerate(arms):
        rows = points[points["arm"] == arm]
        for column, dx, marker in (("exact", -0.1, "o"), ("own", 0.1, "x")):
            values = rows[column].dropna()
            ax.scatter([i + dx] * len(values), values, color=arm_colour(arm), marker=marker)
    ax.set_xticks(range(len(arms)), arms)
    ax.set_xlim(-0.5, len(arms) - 0.5)
    ax.set_ylabel("held-out bits per byte (final)")
    above = unigram > ax.get_ylim()[1]  # a point at or above the unigram keeps it in view
    ax.set_title("end points per seed" + (f" (unigram {unigram:.2f} above the scale)" if above else ""))
    keys = [Line2D([], [], ls="none", marker=m, color="grey", label=w) for m, w in (("o", "exact"),
                                                                                  ("x", "own schedule"))]
    floor = [] if above else [x for x in ax.get_lines() if x.get_label().startswith("unigram")]
    ax.legend(handles=keys + floor, loc="best", fontsize=8)
    return figure


def outcome_figure(ctx: Context, arms: dict[str, list[str]], ends: pd.DataFrame):
    """A text recipe's figure from its runs."""
    points = end_points(ctx.per_example, arms, ends)
    return text_figure({arm: curves(ctx.out, names) for arm, names in arms.items()}, points, unigram_bpb(),
                       text_title(points))


def saved_figure(out: Path):
    """``outcome_figure`` redrawn from a text recipe's files: no model loaded, no number recomputed."""
    summary = json.loads((out / "summary.json").read_text())
    arms = {arm: sorted(p.name for p in out.glob(f"text_{arm}_s*") if p.is_dir())
            for arm in pd.read_csv(out / "results.csv")["arm"]}
    per_example = {n: add_bpb(pd.read_csv(out / n / EVAL_FILE)) for names in arms.values() for n in names}
    points = end_points(per_example, arms, pd.DataFrame(summary["ends"]))
    return text_figure({arm: curves(out, names) for arm, names in arms.items()}, points,
                       summary["unigram_bpb"], text_title(points))


def prepare(ctx: Context) -> None:
    for frame in ctx.per_example.values():
        add_bpb(frame)

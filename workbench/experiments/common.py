"""Shared pieces of the recipes: configs at matched compute (the trainer's own FLOP accounting), comparisons."""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd

from .. import schedules, tasks
from ..evaluation import hierarchical_difference
from ..model import build_model
from ..train import TrainConfig
from .core import EVAL_SIZE, Context, RunSpec

SMALL_MODEL = {"n_layer": 2, "n_head": 2, "n_embd": 64}
LRT_MODEL = {**SMALL_MODEL, "mechanism": "lrt", "lrt_gamma_init": 0.1}
FBT_MODEL = {**SMALL_MODEL, "mechanism": "fbt"}
FBT_MIX = {1: 0.75, 2: 0.22, 3: 0.03}
RUNNING_SUM = {"p": 5, "length": 32}
EXACT = schedules.Sequential()
LEARNED_MARGIN = 0.10  # above the chance floor


def steps(base: float, scale: float) -> int:
    return max(2, int(round(base * scale)))


def curve_every(n_steps: int, marks: int) -> int:
    """``eval_every`` for ``marks`` evaluations (a tiny run: the four a last quarter needs)."""
    return max(1, n_steps // marks) if n_steps >= 4 * marks else max(1, n_steps // 4)


SMOKE_EVAL_SIZE = 8


def eval_size(scale: float) -> int:
    """Fewer below scale 1, where evaluation would dwarf training."""
    return EVAL_SIZE if scale >= 1 else SMOKE_EVAL_SIZE


def step_flops(cfg: TrainConfig, schedule: schedules.Schedule | None = None) -> float:
    """Training FLOPs of one step of ``cfg`` (under its own schedule by default)."""
    task = tasks.get(cfg.task, **cfg.task_params)
    model = build_model(cfg.model_config(task.vocab_size, task.seq_len), device="meta")
    return (schedule or cfg.schedule).flops(model, cfg.batch_size, task.seq_len)


def matched_steps(cfg: TrainConfig, budget_flops: float) -> int:
    """Optimiser steps of ``cfg`` that spend ``budget_flops``."""
    return max(2, int(budget_flops // step_flops(cfg)))


def config(task: str, model: dict, n_steps: int, seed: int, task_params: dict | None = None, **kw) -> TrainConfig:
    """The recipes' common training config."""
    return TrainConfig(task=task, task_params=task_params or {}, model=dict(model), steps=n_steps, seed=seed,
                       batch_size=32, progress=False, log_every=10, eval_size=64, **kw)


def budget_runs(prefix: str, specs: list[tuple[str, TrainConfig, dict]], base_steps: int, scale: float,
                reference: TrainConfig | None = None) -> list[RunSpec]:
    """Runs given the FLOPs of ``base_steps`` single-pass steps of ``reference`` (default: the first)."""
    first = (specs[0][1] if reference is None else reference).replace(schedule=schedules.Single(),
                                                                      steps=steps(base_steps, scale))
    budget = step_flops(first) * first.steps
    return [RunSpec(f"{prefix}{name}", cfg.replace(steps=matched_steps(cfg, budget)), ev, eval_size(scale))
            for name, cfg, ev in specs]


def per_seed(ctx: Context, names: list[str], column: str) -> list[np.ndarray]:
    """One per-example array per seed, all on the same fixed batch."""
    return [ctx.per_example[n][column].to_numpy(dtype=np.float64) for n in names]


def compare(ctx: Context, arms: dict[str, list[str]], reference: str, column: str, lower_is_better: bool
            ) -> tuple[pd.DataFrame, dict[str, dict[str, float]]]:
    """Per arm: mean, seed spread and the interval of (arm - reference)."""
    rows, intervals = [], {}
    ref = per_seed(ctx, arms[reference], column)
    for arm, names in arms.items():
        seed_means = [float(a.mean()) for a in per_seed(ctx, names, column)]
        row = {"arm": arm, "metric": column, "value": float(np.mean(seed_means)),
               "seed_std": float(np.std(seed_means)), "seeds": len(names)}
        if arm != reference:
            interval = hierarchical_difference(ref, per_seed(ctx, names, column), seed=len(rows))
            intervals[arm] = interval
            row.update({f"diff_vs_{reference}": interval["mean"], "ci_low": interval["low"],
                        "ci_high": interval["high"]})
        rows.append(row)
    table = pd.DataFrame(rows)
    table["better_if"] = "lower" if lower_is_better else "higher"
    return table, intervals


def arms_by_prefix(ctx: Context, template: str, arms: tuple[str, ...]) -> dict[str, list[str]]:
    """Each arm's run names, by prefix."""
    return {arm: [n for n in ctx.runs if n.startswith(template.format(arm=arm))] for arm in arms}


METRIC_WORDS = {"bpb": "bits per byte", "val_bpb": "held-out bits per byte", "loss": "loss (nats / token)"}
LOWER_IS_BETTER = ("bpb", "bits", "loss", "nats")  # a metric naming one of these is better when lower

# An arm's "deep" palette index in every figure, by name, else by family (name up to its first "_"). Grey (7) is
# left to reference lines; gates_only shares lrt_blockwise's green (never drawn together).
ARM_COLOURS = {"baseline": 0, "lrt_interleaved": 1, "lrt_blockwise": 2, "lrt_src3": 3, "lrt_src1": 4,
               "lrt_older": 5, "lrt_pooled": 6, "lrt_kv_only": 8, "lrt_residual_only": 9, "gates_only": 2,
               "base": 0, "lrt": 1, "sequential": 1, "fbt": 2, "glu": 2, "add": 3}


def arm_colour(arm: str) -> tuple[float, float, float]:
    """``arm``'s colour, fixed by its name: the same arm looks the same in every figure."""
    import zlib

    import seaborn as sns

    palette = sns.color_palette("deep")
    index = ARM_COLOURS.get(arm, ARM_COLOURS.get(arm.split("_")[0]))
    return palette[zlib.crc32(arm.encode()) % len(palette) if index is None else index]


def _lower(metric: str) -> bool:
    return any(word in metric.lower() for word in LOWER_IS_BETTER)


def best_takeaway(table: pd.DataFrame, keys: list[str]) -> str:
    """Which arm is best over every panel of a metric; "" for a single arm."""
    bests = []
    for k, g in table.groupby(keys, sort=False):
        if g["arm"].nunique() > 1:
            lower = _lower(str(g["metric"].iloc[0]))
            row = g.loc[g["value"].idxmin() if lower else g["value"].idxmax()]
            name = " / ".join(METRIC_WORDS.get(str(x), str(x)) for x in k)  # a list's keys: tuples
            bests.append((name, row["arm"], float(row["value"]), lower))
    if len(bests) == 1:
        _, arm, value, lower = bests[0]
        return f"best: {arm} {value:.3f} ({'lower' if lower else 'higher'} is better)"
    if bests and len({b[1] for b in bests}) == 1:
        return f"best in all {len(bests)} measures: {bests[0][1]}"
    return "best: " + "; ".join(f"{arm} {value:.3f} ({name})" for name, arm, value, _ in bests) if bests else ""


def verdict_title(verdict: str) -> str:
    """A verdict as a figure's first lines."""
    return textwrap.fill(f"verdict: {verdict}", 100)


def bar_figure(table: pd.DataFrame, title: str):
    """One bar per arm, a panel per task/metric; a ``floor`` column (so a redraw shows it) is a line."""
    from ..plots.base import panel_grid, require_columns, split_panels

    require_columns(table, ["arm", "metric", "value", *(["floor_label"] if "floor" in table else [])], "bar_figure")
    keys = [c for c in ("task", "metric") if c in table.columns]
    panels = []
    for k, g in table.groupby(keys, sort=False):
        name = " / ".join(METRIC_WORDS.get(str(x), str(x)) for x in k)
        panels += split_panels(name, g)
    widest = max(len(g) for _, g in panels)
    figure, axes = panel_grid(len(panels), panel=(max(3.4, 1.2 + 0.9 * widest), 3.6))
    for ax, (name, group) in zip(axes, panels):
        err = group["seed_std"] if "seed_std" in group else None
        ax.bar(np.arange(len(group)), group["value"], yerr=err, color=[arm_colour(str(a)) for a in group["arm"]],
               capsize=3)
        ax.set_xticks(np.arange(len(group)), [textwrap.fill(str(a).replace("_", " "), 10, break_long_words=False)
                                              for a in group["arm"]],
                      fontsize=8)
        ax.set_xlim(-0.5, widest - 0.5)  # the same bar width in every panel
        metric = str(group["metric"].iloc[0])
        ax.set_title(f"{name}\n({'lower' if _lower(metric) else 'higher'} is better)", fontsize=9)
        ax.set_ylabel(METRIC_WORDS.get(metric, metric))
        if "floor" in group:
            value, label = float(group["floor"].iloc[0]), str(group["floor_label"].iloc[0])
            ax.axhline(value, color="grey", ls=":", lw=1.5, label=f"{label} {value:.3f}")
    legend = {}  # each label once, from the first panel that draws it
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    if legend:  # below the panels: inside, a floor's legend sat on the bars
        figure.legend(list(legend.values()), list(legend), fontsize=8, loc="outside lower center",
                      ncols=min(len(legend), 4))
    lines = [*title.splitlines(), best_takeaway(table, keys)]  # each wrapped: a figure is at most MAX_WIDTH wide
    said = "\n".join(textwrap.fill(line, 110) for line in lines if line)
    if said:
        figure.suptitle(said)
    return figure


def describe(arm: str, interval: dict[str, float], unit: str) -> str:
    seeds = f", {interval['seeds']} seeds" if "seeds" in interval else ""
    unit = f" {unit}" if unit else ""
    return f"{arm}: {interval['mean']:+.4f}{unit} [{interval['low']:+.4f}, {interval['high']:+.4f}{seeds}]"


def running_sum_chance(params: dict) -> float:
    return tasks.get("running_sum", **params).chance_accuracy()


def learned_gates_values(ctx: Context, arms: dict[str, list[str]], floor: float) -> dict[str, float]:
    """Each arm's "learned" gate: its worst seed's accuracy over the chance floor."""
    return {f"{arm} learned": min(float(ctx.per_example[n]["accuracy"].mean()) for n in names) - floor
            for arm, names in arms.items()}


def last_quarter_improvement(history: pd.DataFrame, column: str = "loss") -> float:
    """Relative fall of ``column`` over the last quarter of training (NaN under 8 rows)."""
    values = history[column].dropna().to_numpy()
    if len(values) < 8:
        return float("nan")
    quarter = max(2, len(values) // 4)
    start = float(np.mean(values[-quarter - 2: -quarter + 1]))
    end = float(np.mean(values[-3:]))
    return (start - end) / end

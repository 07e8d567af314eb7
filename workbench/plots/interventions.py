"""Figures of interventions: does the model use what a probe can read?"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure, SubFigure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from .base import (
    STYLE,
    empty_panel,
    in_order,
    new_figure,
    panel_grid,
    require_columns,
    shared_legend,
    split_panels,
)

INTERVENTION_COLORS = {"swap": "#c44e52", "control": "#4c72b0", "cross": "#55a868", "cross_control": "#8172b3",
                       "mean": "#dd8452", "zero": "#8c8c8c"}


KIND_WORDS = {"swap": "swap: another example's memory, other label",
              "control": "control: another example's memory, same label",
              "cross": "cross: another group's memory, other label",
              "cross_control": "cross control: another group's memory, same label",
              "mean": "mean: the batch-mean memory", "zero": "zero: the memory set to 0"}
DESIGN_WORDS = {"site": "site: one memory read edited", "stream": "stream: every memory read of a 2-pass run edited"}


def swap_takeaway(swaps: pd.DataFrame) -> str:
    """Per design, the verdicts counted, else mean swap and control flip rates."""
    if swaps.empty:
        return "no gated specimen: nothing intervened on"
    designs = swaps["design"] if "design" in swaps else pd.Series("", index=swaps.index)
    parts = []
    for design, rows in swaps.groupby(designs, sort=False):
        if "verdict" in rows:
            counts = rows["verdict"].value_counts()
            said = ", ".join(f"{n} of {len(rows)} '{verdict}'" for verdict, n in counts.items())
        else:
            require_columns(rows, ["swap_flip"], "swap_takeaway")
            said = f"a swap flips {rows['swap_flip'].mean():.0%} of answers"
            if "control_flip" in rows:
                said += f", a control {rows['control_flip'].mean():.0%}"
        parts.append(f"{design} edits: {said}" if design else said)
    return "; ".join(parts)


def _draw_flips(ax: Axes, swaps: pd.DataFrame, kinds: Sequence[str], labels: list[str]) -> list[str]:
    """The bars of ``swaps`` in ``ax``; returns the kinds that flip no answer anywhere."""
    x = np.arange(len(swaps))
    width = 0.8 / (len(kinds) + 1)
    never = []  # no bar to see, so no legend colour: said in words
    for i, kind in enumerate(kinds):
        rate = swaps[f"{kind}_flip"].to_numpy()
        # a bootstrap percentile interval of a mean near 0 or 1 can miss the mean by rounding: never a negative bar
        err = np.clip(np.vstack([rate - swaps[f"{kind}_low"].to_numpy(), swaps[f"{kind}_high"].to_numpy() - rate]),
                      0, None)
        visible = bool(np.nan_to_num(swaps[f"{kind}_high"].to_numpy()).any() or np.nan_to_num(rate).any())
        if not visible:
            never.append(kind)
        ax.bar(x - 0.4 + width * (i + 0.5), rate, width, yerr=err, capsize=2, color=INTERVENTION_COLORS[kind],
               label=KIND_WORDS[kind] if visible else None)
    # the probe's and the twin's marks apart in the last slot: at 1.0 both would overprint at one x
    for column, marker, color, shift, label in (
            ("probe_accuracy", "D", "black", -0.75, "probe acc. (layer 0, suffix1)"),
            ("probe_twin_accuracy", "x", "dimgrey", -0.05, "untrained twin's probe acc.")):
        if column in swaps and swaps[column].notna().any():
            ax.scatter(x + 0.4 + shift * width, swaps[column], marker=marker, s=28, color=color, zorder=3,
                       label=label)
    ax.set_xticks(x, labels, fontsize=8)
    ax.set(ylim=(0, 1.05), ylabel="share of answers / probe acc.")
    return never


def _short_label(row: pd.Series) -> str:
    """Tick label, a word a line: specimen without task (else scratch lines), then design."""
    if pd.notna(row.get("specimen")):
        name = str(row["specimen"]).removeprefix(str(row["task"])).strip()
        words = re.sub(r"_s(\d+)$", r" s\1", name).replace("seed ", "seed\u00a0").split(" ")
    else:
        words = [f"{int(row['scratch_updates'])} scratch"]
    return "\n".join([*words, *([str(row["design"])] if pd.notna(row.get("design")) else [])])


def swap_flips(swaps: pd.DataFrame, title: str | None = None, kinds: Sequence[str] | None = None,
               figure: Figure | SubFigure | None = None) -> Figure | SubFigure:
    """Flip rate per specimen and edit beside the layer-0 probe: decoded but not flipped is decodability without
    use."""
    kinds = [k for k in (INTERVENTION_COLORS if kinds is None else kinds) if f"{k}_flip" in swaps.columns]
    if swaps.empty:
        fig, axes = new_figure(1, panel=(7.0, 3.2)) if figure is None else (figure, [figure.subplots()])
        empty_panel(axes[0], "no gated specimen: nothing intervened on")
        return fig
    require_columns(swaps, ["task", "scratch_updates", *[f"{k}_flip" for k in kinds]], "swap_flips")
    panels = [part for task in in_order(swaps["task"])
              for part in split_panels(str(task), swaps[swaps["task"] == task].reset_index(drop=True))]
    slots = max(len(rows) for _, rows in panels)
    if figure is None:
        fig, axes = panel_grid(len(panels), panel=(max(3.6, 0.75 * slots + 1.2), 3.2))
    else:
        with sns.axes_style(STYLE):
            fig, axes = figure, list(np.atleast_1d(figure.subplots(1, len(panels))))
    never_all = set(kinds)
    for panel, (name, rows) in zip(axes, panels):
        never_all &= set(_draw_flips(panel, rows, kinds, [_short_label(r) for _, r in rows.iterrows()]))
        panel.set_xlim(-0.5, slots - 0.5)  # the same bar width in every panel
        panel.set_title(f"{name} (95 % intervals)", fontsize=9, loc="left")
    handles, labels = shared_legend(axes)
    order = [KIND_WORDS[k] for k in kinds]  # the edits in their fixed order, then the probe marks
    pairs = sorted(zip(handles, labels), key=lambda p: order.index(p[1]) if p[1] in order else len(order))
    handles, labels = [h for h, _ in pairs], [label for _, label in pairs]
    if "design" in swaps:
        for design in in_order(swaps["design"].dropna()):
            handles.append(Line2D([], [], ls="none"))
            labels.append(DESIGN_WORDS.get(design, str(design)))
    if never_all:
        handles.append(Line2D([], [], ls="none"))
        labels.append(f"no bar: {', '.join(k for k in kinds if k in never_all)} flip no answer anywhere")
    fig.legend(handles, labels, fontsize=8, loc="outside lower center", ncols=3, frameon=False)
    title = f"does the answer follow the memory?\n{swap_takeaway(swaps)}" if title is None else title
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def ablation_takeaway(frame: pd.DataFrame, share: float = 0.1) -> str:
    """Distances whose loss increase is at least ``share`` of the largest."""
    require_columns(frame, ["distance", "increase"], "ablation_takeaway")
    by_d = frame.groupby("distance")["increase"].mean().sort_index()
    top = float(by_d.max())
    if top <= 0:
        return "ablating the memory raises no loss at any distance"
    matters = by_d[by_d >= share * top].index
    reach = int(matters.max())
    beyond = by_d[by_d.index > reach]
    span = "1 position" if reach == 1 else f"1-{reach} positions"
    at = "d = 1" if reach == 1 else f"d <= {reach}"
    text = f"only the memory {span} back matters: +{float(by_d.loc[by_d.index <= reach].max()):.3f} nats at {at}"
    return text + (f", at most {float(beyond.max()):+.3f} beyond" if len(beyond) else "")


def ablation_distance(frame: pd.DataFrame, axes: Sequence[Axes] | None = None, title: str | None = None) -> Figure:
    """Loss increase against ablated distance d, and at d = 1 by position."""
    own = axes is None
    fig, axes = new_figure(2, panel=(4.4, 3.6)) if axes is None else (axes[0].figure, list(axes))
    if frame.empty:
        for ax in axes:
            empty_panel(ax, "no gated LRT text specimen")
        return fig
    require_columns(frame, ["distance", "position", "increase"], "ablation_distance")
    frame = frame.reset_index(drop=True)
    runs = (frame["run"] if "run" in frame else pd.Series("", index=frame.index)).astype(str)
    arms = runs.str.replace(r"_s\d+$", "", regex=True)  # seeds of one arm: one colour, one mean
    colors = sns.color_palette("deep", n_colors=max(1, arms.nunique()))
    banded = False
    for color, (arm, rows) in zip(colors, frame.groupby(arms, sort=True)):
        seeds = runs[rows.index]
        for ax, rows_of, style in ((axes[0], rows, {"marker": "o", "ms": 3}),
                                   (axes[1], rows[rows["distance"] == 1], {})):
            key = "distance" if ax is axes[0] else "position"
            per_seed = rows_of.groupby([seeds[rows_of.index], rows_of[key]])["increase"].mean().unstack(0)
            mean = per_seed.mean(axis=1)
            n = per_seed.shape[1]
            # the seed mean bold, on top; each seed thin under it and its range a band: the effect, not the noise
            ax.plot(mean.index, mean.to_numpy(), color=color, lw=2.2 if n > 1 else 1.2, zorder=3, **style,
                    label=f"{arm} (mean of {n} seeds)" if n > 1 else arm)
            if n > 1:
                banded = True
                ax.fill_between(mean.index, per_seed.min(axis=1), per_seed.max(axis=1), color=color, alpha=0.2,
                                lw=0, zorder=1)
                for seed in per_seed:
                    ax.plot(per_seed.index, per_seed[seed].to_numpy(), color=color, lw=0.6, alpha=0.45, zorder=2)
    for ax in axes:  # few ticks: the panels are narrow and positions run to three digits
        ax.axhline(0.0, color="black", lw=0.8, ls=":")
        ax.xaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))
    axes[0].set(xlabel="d: the ablated memory lies d positions back", ylabel="loss increase at t (nats)",
                title="memory ablated d back")
    axes[1].set(xlabel="position t (reads the ablated memory)", ylabel="loss increase at t (nats)",
                title="d = 1, by position")
    if arms.nunique() > 1 or banded:
        handles, labels = axes[0].get_legend_handles_labels()
        if banded:
            handles.append(Patch(color="grey", alpha=0.2, lw=0))
            labels.append("band: seed range (thin: each seed)")
        axes[0].legend(handles, labels, fontsize=7)
    title = (ablation_takeaway(frame) if own else "") if title is None else title
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def answer_logits(frame: pd.DataFrame, title: str = "") -> Figure:
    """One example's answer logits per intervention: which way each edit moves it."""
    require_columns(frame, ["intervention", "token", "logit"], "answer_logits")
    fig, axes = new_figure(1, panel=(5.6, 3.4))
    ax = axes[0]
    table = frame.pivot_table(index="intervention", columns="token", values="logit", sort=False)
    colors = sns.color_palette("deep", n_colors=len(table.columns))
    x = np.arange(len(table))
    width = 0.8 / len(table.columns)
    for i, (token, color) in enumerate(zip(table.columns, colors)):
        ax.bar(x - 0.4 + width * (i + 0.5), table[token].to_numpy(), width, color=color, label=f"logit of {token}")
    ax.set_xticks(x, table.index, fontsize=8)
    ax.axhline(0.0, color="black", lw=0.8)
    ax.set_ylabel("logit at the label position")
    if title:
        ax.set_title(textwrap.fill(title, 60), fontsize=9)
    fig.legend(fontsize=8, loc="outside lower center", ncols=len(table.columns), frameon=False)  # never over a bar
    return fig


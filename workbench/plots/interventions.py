"""Figures of interventions (``analysis.interventions``): does the model use what a probe can read?"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .base import (
    empty_panel,
    new_figure,
    require_columns,
)

INTERVENTION_COLORS = {"swap": "#c44e52", "control": "#4c72b0", "cross": "#55a868", "cross_control": "#8172b3",
                       "mean": "#dd8452", "zero": "#8c8c8c"}


def _tick_label(name: str, width: int = 12) -> str:
    """A specimen's name as tick-label lines: its last word alone, the rest wrapped at underscores."""
    head, _, tail = name.rpartition(" ") if " " in name else name.rpartition("_")
    if not head:
        return name
    lines: list[str] = []
    for word in head.split("_"):
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += f"_{word}"
        else:
            lines.append(word)
    return "\n".join([*lines, tail])


def swap_flips(swaps: pd.DataFrame, ax: Axes | None = None) -> Figure:
    """Answer flip rate per gated specimen and intervention (``causal_use``'s table), beside the layer-0 probe
    accuracy and the untrained twin's: a probe that decodes the label while the swap leaves the answer alone shows
    decodability without use."""
    # about an inch per specimen and design, so neither the bars nor the two-line tick labels run together
    fig, axes = new_figure(1, panel=(max(7.0, 1.1 * len(swaps)), 3.8)) if ax is None else (ax.figure, [ax])
    ax = axes[0]
    if swaps.empty:
        empty_panel(ax, "no gated specimen: nothing intervened on")
        return fig
    kinds = [k for k in INTERVENTION_COLORS if f"{k}_flip" in swaps.columns]
    require_columns(swaps, ["task", "scratch_updates", *[f"{k}_flip" for k in kinds]], "swap_flips")
    x = np.arange(len(swaps))
    width = 0.8 / (len(kinds) + 1)
    never = []  # kinds that flip no answer anywhere: no bar to see, so no legend colour; said in words
    for i, kind in enumerate(kinds):
        rate = swaps[f"{kind}_flip"].to_numpy()
        # a bootstrap percentile interval of a mean near 0 or 1 can miss the mean by rounding: never a negative bar
        err = np.clip(np.vstack([rate - swaps[f"{kind}_low"].to_numpy(), swaps[f"{kind}_high"].to_numpy() - rate]),
                      0, None)
        visible = bool(np.nan_to_num(swaps[f"{kind}_high"].to_numpy()).any() or np.nan_to_num(rate).any())
        if not visible:
            never.append(kind)
        ax.bar(x - 0.4 + width * (i + 0.5), rate, width, yerr=err, capsize=2, color=INTERVENTION_COLORS[kind],
               label=f"{kind} flip rate" if visible else None)
    for column, marker, color, label in (("probe_accuracy", "D", "black", "probe acc. (layer 0, suffix1)"),
                                         ("probe_twin_accuracy", "x", "dimgrey", "untrained twin's probe acc.")):
        if column in swaps and swaps[column].notna().any():
            ax.scatter(x + 0.4 - width / 2, swaps[column], marker=marker, color=color, zorder=3, label=label)
    labels = ([_tick_label(name) + f" {design}" for name, design in zip(swaps["specimen"], swaps["design"])]
              if {"specimen", "design"} <= set(swaps.columns) else
              [f"{t}\n{int(s)} scratch" for t, s in zip(swaps["task"], swaps["scratch_updates"])])
    ax.set_xticks(x, labels, fontsize=7)
    ax.set(ylim=(0, 1.05), ylabel="share of answers / probe accuracy",
           title="does the answer follow the memory? (95 % intervals)")
    if never:
        ax.text(0.5, 0.5, f"{', '.join(never)}: flip no answer of any specimen (rate 0, interval 0)",
                transform=ax.transAxes, ha="center", va="center", fontsize=8)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig


def ablation_distance(frame: pd.DataFrame, axes: Sequence[Axes] | None = None) -> Figure:
    """``ablation_by_distance`` rows (a ``run`` column per specimen): mean loss increase against d, and at d = 1 by
    position."""
    fig, axes = new_figure(2, panel=(4.4, 3.6)) if axes is None else (axes[0].figure, list(axes))
    if frame.empty:
        for ax in axes:
            empty_panel(ax, "no gated LRT text specimen")
        return fig
    from matplotlib.ticker import MaxNLocator

    require_columns(frame, ["distance", "position", "increase"], "ablation_distance")
    runs = frame["run"] if "run" in frame else pd.Series("", index=frame.index)
    colors = sns.color_palette("deep", n_colors=max(1, runs.nunique()))
    for color, (name, rows) in zip(colors, frame.groupby(runs, sort=True)):
        by_d = rows.groupby("distance")["increase"].mean()
        axes[0].plot(by_d.index, by_d.to_numpy(), "o-", ms=3, color=color, label=str(name))
        first = rows[rows["distance"] == 1].groupby("position")["increase"].mean()
        axes[1].plot(first.index, first.to_numpy(), color=color, lw=1, label=str(name))
    for ax in axes:  # few ticks: the panels are narrow and positions run to three digits
        ax.axhline(0.0, color="black", lw=0.8, ls=":")
        ax.xaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))
    axes[0].set(xlabel="d: the ablated memory lies d positions back", ylabel="loss increase at t (nats)",
                title="memory ablated d back")
    axes[1].set(xlabel="position t (reads the ablated memory)", ylabel="loss increase at t (nats)",
                title="d = 1, by position")
    if runs.nunique() > 1:
        axes[0].legend(fontsize=7)
    return fig


def answer_logits(frame: pd.DataFrame, title: str = "") -> Figure:
    """The answer's logits before and after interventions, for one example (``intervention_logits`` rows:
    ``intervention``, ``token``, ``logit``; ``clean`` is the unedited run): which way each edit moves it."""
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
    ax.set(ylabel="logit at the label position", title=title)
    ax.legend(fontsize=8)
    return fig


"""Figures of reasoning traces: how long each regime writes, and how right it is."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from ..validation import fail
from .base import (
    check_chance,
    in_order,
    new_figure,
    regime_order,
    require_columns,
)

REGIME_WORDS = {"soft_last": "soft_last: SOFT started at the prompt's last token (suffix1)",
                "baseline": "baseline: a model without feedback",
                "training mix": "training mix: the traces it trained on"}


def trace_takeaway(df: pd.DataFrame) -> str:
    """Median trace lengths and the most and least accurate regime."""
    from ..analysis.traces import TRAINING

    require_columns(df, ["regime", "length", "correct"], "trace_takeaway")
    medians = df.groupby("regime", sort=False)["length"].median()
    lengths = (f"median trace {medians.iloc[0]:g} tokens in every regime" if medians.nunique() == 1 else
               "median trace " + ", ".join(f"{r} {m:g}" for r, m in medians.items()) + " tokens")
    accuracy = df[df["regime"] != TRAINING].groupby("regime", sort=False)["correct"].mean()
    if accuracy.empty:
        return lengths
    best, worst = accuracy.idxmax(), accuracy.idxmin()
    return f"{lengths}; most accurate {best} ({accuracy[best]:.0%}), least {worst} ({accuracy[worst]:.0%})"


def trace_lengths(df: pd.DataFrame, lines: pd.DataFrame | None = None, title: str | None = None,
                  chance: float | None = None) -> Figure:
    """Trace length (red points wrong: giving up early shows) and accuracy per regime; ``chance``: the
    majority answer's accuracy."""
    from ..analysis.traces import TRAINING

    require_columns(df, ["regime", "length", "correct"], "trace_lengths")
    if chance is None and "chance" in df and df["chance"].notna().any():
        chance = float(df["chance"].dropna().iloc[0])
    check_chance(chance)
    order = regime_order(df["regime"])
    fig, axes = new_figure(2 if lines is None else 3)
    ax_len, ax_acc = axes[:2]
    palette = dict(zip(order, sns.color_palette("deep", n_colors=len(order))))
    boxes = ax_len.boxplot([df.loc[df["regime"] == r, "length"] for r in order], positions=range(len(order)),
                           widths=0.6, showfliers=False, patch_artist=True, medianprops={"color": "black"})
    for box, regime in zip(boxes["boxes"], order):
        box.set(facecolor=palette[regime], alpha=0.5)
    sns.stripplot(data=df, x="regime", y="length", order=order, hue="correct", hue_order=[False, True],
                  palette={False: "tab:red", True: "black"}, ax=ax_len, size=3, alpha=0.6, jitter=0.2)
    medians = df.groupby("regime")["length"].median()
    top = float(df["length"].max())
    for i, regime in enumerate(order):
        ax_len.text(i, top * 1.04, f"median {medians[regime]:g}", ha="center", fontsize=8)
    names = [r.replace(" ", "\n") for r in order]  # "training mix" on two lines: six regimes side by side fit
    ax_len.set_xticks(range(len(order)), names, fontsize=8)
    ax_len.set(xlabel="regime", ylabel="trace length (tokens before the answer)", ylim=(0, top * 1.12 + 1))
    ax_len.yaxis.set_major_locator(MaxNLocator(integer=True))  # tokens are counted: no tick at 2.5
    # below the panel: inside, the legend would cover the medians written above the boxes
    handles, labels = ax_len.get_legend_handles_labels()
    words = {"False": "wrong answer (point)", "True": "right answer (point)"}
    ax_len.legend(handles, [words.get(label, label) for label in labels], fontsize=8, ncol=2, frameon=False,
                  loc="upper center", bbox_to_anchor=(0.5, -0.3))
    decoded = [r for r in order if r != TRAINING]
    accuracy = df.groupby("regime")["correct"].agg(["mean", "size"]).reindex(decoded)
    ax_acc.bar(range(len(decoded)), accuracy["mean"], color=[palette[r] for r in decoded])
    ax_acc.set_xticks(range(len(decoded)), [r.replace(" ", "\n") for r in decoded], fontsize=8)
    for i, (acc, n) in enumerate(zip(accuracy["mean"], accuracy["size"])):
        ax_acc.text(i, acc + 0.02, f"{acc:.0%} of {n}", ha="center", fontsize=8)
    ax_acc.set(xlabel="regime", ylabel="accuracy", ylim=(0.0, 1.1))
    if chance is not None:  # the key below the panel: inside, it would sit on the bars' labels
        ax_acc.axhline(chance, color="black", ls=":", lw=1.2, label=f"chance {chance:.2f}")
        ax_acc.legend(fontsize=8, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.3))
    if lines is not None:
        _trace_lines(axes[2], lines, palette)
    said = [REGIME_WORDS[r] for r in order if r in REGIME_WORDS]
    if said:
        fig.supxlabel("; ".join(said), fontsize=8)
    title = trace_takeaway(df) if title is None else title
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def _trace_lines(ax: Axes, lines: pd.DataFrame, palette: Mapping[str, object]) -> None:
    """Share of traces by lines written, correct (solid) under wrong (light)."""
    require_columns(lines, ["regime", "outcome", "lines", "count"], "trace_lengths(lines=...)")
    regimes = [r for r in palette if r in set(lines["regime"])]
    counts = lines[lines["outcome"].isin(["correct", "wrong"])].pivot_table(
        index=["regime", "lines"], columns="outcome", values="count", aggfunc="sum", fill_value=0)
    counts = counts.reindex(columns=["correct", "wrong"], fill_value=0)
    values = sorted(int(k) for k in lines["lines"].unique())
    width = 0.8 / max(len(regimes), 1)
    for j, regime in enumerate(regimes):
        part = counts.loc[regime].reindex(values, fill_value=0) / counts.loc[regime].to_numpy().sum()
        x = np.arange(len(values)) - 0.4 + width * (j + 0.5)
        ax.bar(x, part["correct"], width, color=palette[regime], label=regime)
        ax.bar(x, part["wrong"], width, bottom=part["correct"], color=palette[regime], alpha=0.3)
    ax.set_xticks(range(len(values)), [str(v) for v in values])
    ax.set(xlabel="intermediate lines written before the answer", ylabel="share of traces (light: wrong)",
           ylim=(0.0, 1.05))
    ax.legend(fontsize=8)


def trace_example(df: pd.DataFrame, example: int, regime: str | None = None, title: str | None = None) -> Figure:
    """One example's trace length per regime against its median; ``regime`` outlined."""
    require_columns(df, ["regime", "example", "length", "correct"], "trace_example")
    if "run" in df and df["run"].nunique() > 1:
        raise ValueError(f"df holds runs {in_order(df['run'])}: select one")
    rows = df[df["example"] == example]
    if rows.empty:
        fail("example", example, f"the traces hold examples {int(df['example'].min())}..{int(df['example'].max())}")
    order = regime_order(df["regime"])
    if regime is not None and regime not in order:
        fail("regime", regime, f"the traces hold {order}")
    rows = rows.set_index("regime").reindex(order)
    medians = df.groupby("regime")["length"].median().reindex(order)
    fig, (ax,) = new_figure(1, panel=(5.5, 3.6))
    x = np.arange(len(order))
    colors = ["tab:green" if ok else "tab:red" for ok in rows["correct"].fillna(False)]
    bars = ax.bar(x, rows["length"], color=colors, alpha=0.8, width=0.6)
    answered = rows["answered"] if "answered" in rows else pd.Series(True, index=rows.index)
    for bar, name, done in zip(bars, order, answered):
        bar.set_hatch("" if done else "//")
        if name == regime:
            bar.set(edgecolor="black", linewidth=2.5)
    ax.scatter(x, medians, marker="_", s=900, color="black", zorder=3)
    ax.set_xticks(x, order)
    top = float(max(df["length"].max(), 1))
    ax.set(xlabel="regime", ylabel="trace length (tokens before the answer)", ylim=(0, top * 1.1))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # tokens are counted: no tick at 2.5
    if title is None:
        right = [r for r, ok in zip(order, rows["correct"]) if pd.notna(ok) and bool(ok)]
        if regime is not None:
            verdict = "right" if regime in right else "wrong"
            title = (f"example {example}: {regime} writes {rows.loc[regime, 'length']:g} tokens "
                     f"(median {medians[regime]:g}) and answers {verdict}")
        else:
            title = f"example {example}: right under {', '.join(right) or 'no regime'}"
    if title:
        ax.set_title(title, fontsize=10)
    keys = [Patch(color="tab:green", alpha=0.8), Patch(color="tab:red", alpha=0.8),
            Patch(facecolor="white", edgecolor="grey", hatch="//"),
            Line2D([], [], ls="none", marker="_", ms=14, mew=2, color="black")]
    names = ["right answer", "wrong answer", "no answer line", "median over examples"]
    if regime is not None:
        keys.append(Patch(facecolor="white", edgecolor="black", linewidth=2.5))
        names.append(f"selected regime ({regime})")
    fig.legend(keys, names, fontsize=8, loc="outside lower center", ncols=3, frameon=False)
    return fig

"""Figures of the feedback map's dynamics over many passes (``analysis.fixed_point``, ``analysis.jacobians``,
``analysis.lens``)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from .base import (
    STYLE,
    ZERO_LABEL,
    Runs,
    log_count_axis,
    log_line,
    named_runs,
    new_figure,
    require_columns,
    run_styles,
    shared_legend,
)


def contraction_curves(results: Runs, max_pass: int | None = None, depths: Mapping[str, int] | None = None,
                       note: str = "", chance: Mapping[str, float] | None = None) -> Figure:
    """Residual ``delta`` and ``fixed_point_distance`` against pass (log y), one line per ``pass_dynamics`` run, and the
    loss when any run has one.

    Exact zeros are marked ▼ on the axis; past 10 passes the pass axis is logarithmic. ``depths``: label -> pass,
    drawn as verticals (the trained depths, so extrapolation shows); ``note``: a title saying what was measured;
    ``chance``: label -> loss of a model without context, drawn on the loss panel."""
    runs = named_runs(results, "contraction_curves")
    for frame in runs.values():
        require_columns(frame, ["pass", "delta", "fixed_point_distance"], "contraction_curves")
    has_loss = any("loss" in f and f["loss"].notna().any() for f in runs.values())
    panels = [("delta", "residual ||H^k - H^(k-1)|| / ||H^k||"),
              ("fixed_point_distance", "distance to fixed point ||H^k - H*|| / ||H*||")]
    fig, axes = new_figure(3 if has_loss else 2, panel=(4.4, 3.6))
    styles = run_styles(list(runs))
    last = 1
    for name, frame in runs.items():
        if max_pass is not None:
            frame = frame[frame["pass"] <= max_pass]
        last = max(last, int(frame["pass"].max()) if len(frame) else 1)
        for ax, (column, _) in zip(axes, panels):
            log_line(ax, frame["pass"], frame[column], label=name or None, **styles[name])
        if has_loss and "loss" in frame:
            axes[2].plot(frame["pass"], frame["loss"], label=name or None, **styles[name])
    for ax, (_, ylabel) in zip(axes, panels):
        ax.set(xlabel="pass", ylabel=ylabel, yscale="log")
    if has_loss:
        axes[2].set(xlabel="pass", ylabel="loss (nats / token)")
        for label, value in (chance or {}).items():
            axes[2].axhline(value, color="black", ls=":", lw=1, label=label)
    for (label, depth), style in zip((depths or {}).items(), (":", "--", "-.")):
        for ax in axes:
            ax.axvline(depth, color="grey", ls=style, lw=1.2, label=label if ax is axes[0] else None)
    for ax in axes:
        if last > 10:
            log_count_axis(ax, last)
        else:  # passes are whole: no tick at pass 1.5
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    handles, labels = shared_legend(axes)  # the runs and depths of every panel, and the loss panel's chance line
    if len(runs) > 1 or next(iter(runs)) or depths or chance or ZERO_LABEL in labels:
        fig.legend(handles, labels, fontsize=8, loc="outside right upper")
    if note:
        fig.suptitle(note, fontsize=10)
    return fig


def sensitivity_decay(results: Runs, note: str = "") -> Figure:
    """Effect of a perturbation of the carried memory against distance (log y), one line per ``sensitivity`` run. The
    dotted line at 1 is the injected perturbation: below it the recurrence forgets, above it amplifies; a run without
    a mechanism has effect exactly 0 and says so."""
    runs = named_runs(results, "sensitivity_decay")
    fig, (ax,) = new_figure(1, panel=(8.0, 4.0))
    styles = run_styles(list(runs))
    for name, frame in runs.items():
        require_columns(frame, ["distance", "effect"], "sensitivity_decay")
        unused = bool((frame["effect"] == 0).all())
        label = (name or "effect") + (" (exactly 0: memory unused)" if unused else "")
        log_line(ax, frame["distance"], frame["effect"], marker="o", ms=3, label=label, **styles[name])
    ax.axhline(1.0, color="grey", ls=":", lw=1.5, label="injected perturbation")
    ax.set(xlabel="distance d (tokens after the perturbed position)", ylabel="effect ||Δm_{t0+d}|| / eps",
           yscale="log")
    last = max(float(f["distance"].max()) for f in runs.values())
    if last > 10:
        log_count_axis(ax, last)
    fig.legend(*shared_legend([ax]), fontsize=8, loc="outside right upper")
    if note:
        ax.set_title(note, fontsize=10)
    return fig


ARMS_PER_PANEL = 6  # more bars than this in one panel and a reader cannot tell the arms apart


def _family_chunks(arms: list[str], families: list[str]) -> list[tuple[str, list[str]]]:
    """(family, arms) per panel, a family of more than ``ARMS_PER_PANEL`` cut into equal parts."""
    chunks = []
    for family in dict.fromkeys(families):
        group = [a for a, f in zip(arms, families) if f == family]
        parts = -(-len(group) // ARMS_PER_PANEL)
        size = -(-len(group) // parts)
        chunks += [(family if parts == 1 else f"{family} ({k + 1}/{parts})", group[k * size:(k + 1) * size])
                   for k in range(parts)]
    return chunks


def fixed_point_readability(table: pd.DataFrame, title: str = "", readable: float = 0.95) -> Figure:
    """Per arm of ``fixed_point_study``'s table: answer accuracy at passes 1-3 and under the exact recurrence (a dot
    per seed), one row per family, beside its runs' top Lyapunov exponent."""
    require_columns(table, ["arm", "family", "accuracy_pass1", "accuracy_pass2", "accuracy_pass3", "accuracy_exact",
                     "lyapunov_top"], "fixed_point_readability")
    arms = list(dict.fromkeys(table["arm"]))
    chunks = _family_chunks(arms, [table.loc[table["arm"] == a, "family"].iloc[0] for a in arms])
    with sns.axes_style(STYLE):
        fig = Figure(figsize=(12.0, 1.2 + 2.4 * len(chunks)), layout="constrained")
        grid = fig.subplots(len(chunks), 2, gridspec_kw={"width_ratios": [4, 1.3]}, squeeze=False)
    columns = {"accuracy_pass1": ("pass 1 (STANDARD)", "#bbbbbb"), "accuracy_pass2": ("pass 2", "#7fa7d6"),
               "accuracy_pass3": ("pass 3", "#3d6fb0"), "accuracy_exact": ("exact recurrence", "#d1495b")}
    width = 0.8 / len(columns)
    lyapunov = table["lyapunov_top"].to_numpy()
    span = (min(lyapunov.min(), 0.0) * 1.1 - 0.01, max(lyapunov.max(), 0.0) * 1.1 + 0.01)
    for (family, group), (ax, lx) in zip(chunks, grid):
        for j, (column, (label, colour)) in enumerate(columns.items()):
            for i, arm in enumerate(group):
                values = table.loc[table["arm"] == arm, column].to_numpy()
                x = i - 0.4 + width * (j + 0.5)
                ax.bar(x, values.mean(), width, color=colour, label=label)
                ax.scatter(np.full(len(values), x), values, color="black", s=8, zorder=3)
        ax.axhline(readable, color="#d1495b", ls="--", lw=1, label=f"readable bar {readable:g}")
        ax.axhline(0.5, color="grey", ls=":", lw=1, label="chance 0.5")
        ax.set_xticks(range(len(group)), [a.removeprefix("ft_").replace("_", " ") for a in group], fontsize=8)
        ax.set_xlim(-0.5, ARMS_PER_PANEL - 0.5)  # the same bar width in every row
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("answer accuracy")
        ax.set_title(family, fontsize=9, loc="left")
        for i, arm in enumerate(group):
            values = table.loc[table["arm"] == arm, "lyapunov_top"].to_numpy()
            lx.scatter(values, np.full(len(values), i), color="#3d6fb0", s=14)
        lx.axvline(0, color="grey", lw=0.8)
        lx.set_xlim(*span)
        lx.set_ylim(ARMS_PER_PANEL - 0.5, -0.5)
        lx.set_yticks(range(len(group)), [a.removeprefix("ft_").replace("_", " ") for a in group], fontsize=8)
    grid[-1][1].set_xlabel("top Lyapunov exponent, exact\nrecurrence (< 0: perturbations die out)", fontsize=8)
    handles, labels = grid[0][0].get_legend_handles_labels()
    named = dict(zip(labels, handles))  # one entry per label: every panel draws the same series
    fig.legend(named.values(), named.keys(), loc="outside lower center", ncol=6, fontsize=8, frameon=False)
    fig.suptitle(title or "What the fixed point answers, by family of arms", fontsize=10)
    return fig


def fixed_point_accuracy(results: Mapping[str, pd.DataFrame], trained_depth: int | None = None) -> Figure:
    """Answer accuracy against pass per model (``fixed_point_quality(...).per_example`` frames), the exact
    recurrence's dashed: a line ending above its dash reads its passes better than their fixed point."""
    fig, (ax,) = new_figure(1, panel=(7.2, 3.8))
    palette = sns.color_palette("tab10", len(results))
    for colour, (name, frame) in zip(palette, results.items()):
        require_columns(frame, ["pass", "schedule", "correct"], "fixed_point_accuracy")
        passes = frame[frame["schedule"] == "multipass"].groupby("pass")["correct"].mean()
        ax.plot(passes.index, passes.to_numpy(), marker="o", ms=3, color=colour, label=name)
        exact = float(frame.loc[frame["schedule"] == "sequential", "correct"].mean())
        ax.axhline(exact, color=colour, ls="--", lw=1)
    if trained_depth is not None:
        ax.axvspan(1, trained_depth, color="grey", alpha=0.12, label=f"trained depths 1-{trained_depth}")
    ax.set_xscale("log")
    ax.set_xlabel("Jacobi pass (log)")
    ax.set_ylabel("answer accuracy")
    ax.set_ylim(-0.03, 1.03)
    ax.set_title("solid: pass k; dashed: the exact recurrence (the fixed point)", fontsize=9)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, frameon=False)
    return fig


def lyapunov_curves(results: Mapping[str, pd.DataFrame]) -> Figure:
    """Top finite-time Lyapunov exponent against horizon per model (mean over examples, min-max band):
    ``analysis.jacobians.lyapunov`` frames by name, one panel per path ("full", "memory")."""
    frames = {name: f[f["index"] == 1] for name, f in results.items()}
    paths = sorted({p for f in frames.values() for p in f["path"].unique()})
    fig, axes = new_figure(len(paths), panel=(5.2, 3.6))
    palette = sns.color_palette("tab10", len(frames))
    for ax, path in zip(axes, paths):
        for colour, (name, frame) in zip(palette, frames.items()):
            by = frame[frame["path"] == path].groupby("horizon")["exponent"]
            if by.ngroups == 0:
                continue
            mean, low, high = by.mean(), by.min(), by.max()
            ax.plot(mean.index, mean.to_numpy(), color=colour, label=name)
            ax.fill_between(mean.index, low.to_numpy(), high.to_numpy(), color=colour, alpha=0.15)
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_xlabel("horizon n (positions after the perturbed memory)")
        ax.set_ylabel("top exponent (1/n) log growth")
        ax.set_title({"full": "exact tangent: memory chain and keys/values",
                      "memory": "memory chain only (keys/values held)"}.get(path, path), fontsize=9)
    axes[-1].legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, frameon=False)
    return fig


def lens_by_pass(results: Mapping[str, pd.DataFrame], lens: str = "logit", value: str = "top1_is_answer") -> Figure:
    """Heatmaps of what a lens reads at the answer position, pass (columns) by depth (rows), one panel per model:
    ``analysis.lens.fed_back_lens(...)["lens"]`` frames by name."""
    fig, axes = new_figure(len(results), panel=(4.2, 2.6))
    for ax, (name, frame) in zip(axes, results.items()):
        require_columns(frame, ["pass", "depth", "lens", value], "lens_by_pass")
        grid = frame[frame["lens"] == lens].pivot(index="depth", columns="pass", values=value)
        grid = grid.sort_index(ascending=False)
        sns.heatmap(grid, ax=ax, vmin=0, vmax=1, cmap="viridis", annot=grid.shape[1] <= 8, fmt=".2f",
                    cbar=ax is axes[-1], annot_kws={"fontsize": 7})
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("pass")
        ax.set_ylabel("depth (0 = input)")
    fig.suptitle(f"{lens} lens at the answer position: {value.replace('_', ' ')}", fontsize=10)
    return fig


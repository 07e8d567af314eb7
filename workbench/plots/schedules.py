"""Figures of schedules and decoding regimes against the exact recurrence."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from ..decode import REGIMES
from ..schedules import VALUES as SCHEDULE_VALUES
from ..validation import fail
from .base import (
    MARKERS,
    in_order,
    log_line,
    new_figure,
    positive_only,
    regime_order,
    require_columns,
    settled_from,
    with_difference,
    zero_line,
)
from .training import check_floor, floor_line


def jacobi_settling(frame: pd.DataFrame, exact_below: float = 1e-9) -> Figure:
    """Error by pass x position, below ``exact_below`` white: pass k is exact at t < k."""
    require_columns(frame, ["pass", "position", "error"], "jacobi_settling")
    table = frame.pivot_table(index="pass", columns="position", values="error", aggfunc="max").sort_index()
    values = table.to_numpy(dtype=float)
    exact = values < exact_below
    logs = np.log10(np.where(exact, np.nan, values))
    width = float(np.clip(2.5 + 0.12 * table.shape[1], 5.0, 9.0))
    fig, (ax,) = new_figure(1, panel=(width, float(np.clip(2.0 + 0.12 * table.shape[0], 3.6, 6.0))))
    extent = (table.columns.min() - 0.5, table.columns.max() + 0.5, table.index.max() + 0.5, table.index.min() - 0.5)
    image = ax.imshow(logs, aspect="auto", cmap="magma", extent=extent, interpolation="nearest")
    ax.contour(table.columns, table.index, exact.astype(float), levels=[0.5], colors="tab:blue", linewidths=1.5)
    ax.plot([], [], color="tab:blue", lw=1.5, label="exact boundary t < k")  # the contour's legend entry
    fig.legend(fontsize=8, loc="outside lower center", frameon=False)
    ax.grid(False)
    ax.set(xlabel="position t", ylabel="pass k", title=f"pass k is exact at positions t < k (white: < {exact_below:g})")
    # padded: unpadded, the label touched the minus signs of the tick labels in the browser
    fig.colorbar(image, ax=ax, pad=0.03).set_label("log10 ||H^k_t - H*_t|| / ||H*_t||", labelpad=10)
    return fig


def regime_losses(frame: pd.DataFrame, title: str = "", floor: float | None = None,
                  floor_label: str = "unigram", reference: str | None = "standard") -> Figure:
    """Loss per position per regime: helping a few positions is told from helping throughout; ``floor`` in
    nats. With ``reference`` among the regimes, a panel below draws each other one minus it (``with_difference``)."""
    require_columns(frame, ["regime", "position", "loss"], "regime_losses")
    check_floor(floor)
    order = regime_order(frame["regime"])
    palette = dict(zip(REGIMES, sns.color_palette("deep", n_colors=len(REGIMES))))
    others = [r for r in order if r != reference] if reference in order else []
    fig, ax, below = with_difference(7.0, 3.6, bool(others))
    for regime in order:
        rows = frame[frame["regime"] == regime].sort_values("position")
        ax.plot(rows["position"], rows["loss"], "o-", ms=3, color=palette.get(regime),
                label=f"{regime} (mean {rows['loss'].mean():.3f})")
    floor_line(ax, floor, floor_label)
    ax.set(xlabel="" if below else "position (predicting the next token)", ylabel="loss (nats / token)")
    if title:
        ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    if below is not None:
        base = frame[frame["regime"] == reference].groupby("position")["loss"].mean()
        zero_line(below, palette.get(reference, "black"), label=f"{reference} (0)")
        for regime in others:
            rows = frame[frame["regime"] == regime].groupby("position")["loss"].mean()
            gap = (rows - base).dropna()
            below.plot(gap.index, gap.to_numpy(), "o-", ms=3, color=palette.get(regime),
                       label=f"{regime} - {reference} (mean {gap.mean():+.3f})")
        below.set(xlabel="position (predicting the next token)", ylabel=f"loss - {reference}\n(nats / token)")
        below.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig


def regime_takeaway(frame: pd.DataFrame, reference: str = "standard") -> str:
    """Each regime's mean loss minus ``reference``'s."""
    require_columns(frame, ["regime", "position", "loss"], "regime_takeaway")
    means = frame.groupby("regime", sort=False)["loss"].mean()
    if reference not in means:
        fail("reference", reference, f"the frame holds regimes {list(means.index)}")
    others = [r for r in means.index if r != reference]
    if not others:
        return f"{reference}: mean loss {means[reference]:.3f} nats / token"
    return "; ".join(f"{r} - {reference}: {means[r] - means[reference]:+.3f} nats / token" for r in others) + \
        f" (mean over {frame['position'].nunique()} positions)"


def knob_symbol(schedule: str) -> str:
    """A schedule's knob letter (K, S, B); ``value`` when it has none."""
    value = SCHEDULE_VALUES.get(schedule)
    return (value.symbol if value is not None else "") or "value"


def _first_exact(values: pd.Series, distances: pd.Series, exact_below: float) -> object | None:
    """Knob value from which every distance stays below ``exact_below`` (None: never)."""
    order = np.argsort(values.to_numpy(dtype=float))
    k = settled_from(distances.to_numpy(dtype=float)[order] < exact_below)
    return None if k is None else values.to_numpy()[order][k]


def schedule_takeaway(sweeps: pd.DataFrame, exact_below: float = 1e-5) -> str:
    """Which schedules get within ``exact_below`` of the exact recurrence, from which knob value."""
    require_columns(sweeps, ["schedule", "value", "distance"], "schedule_takeaway")
    reached, never = [], []
    for schedule in in_order(sweeps["schedule"]):
        rows = sweeps[sweeps["schedule"] == schedule]
        first = _first_exact(rows["value"], rows["distance"], exact_below)
        at = sorted(int(v) for v in rows.loc[rows["distance"] < exact_below, "value"])
        if first is None and at:  # e.g. blockwise at B = 1, which is the sequential recurrence
            reached.append(f"{schedule} only at {knob_symbol(schedule)} = {', '.join(map(str, at))}")
        elif first is None:
            never.append(schedule)
        else:
            reached.append(f"{schedule} from {knob_symbol(schedule)} = {int(first)}")
    head = f"within {exact_below:g} of the exact recurrence: " + (", ".join(reached) if reached else "none")
    return head + (f"; {', '.join(never)} never" if never else "")


def schedule_distance(sweeps: pd.DataFrame, positions: Mapping[str, pd.DataFrame] | None = None,
                      selected: Mapping[str, int] | None = None, title: str | None = None,
                      exact_below: float = 1e-5) -> Figure:
    """Each schedule's distance to the exact logits by knob (``selected`` ringed) and by position."""
    require_columns(sweeps, ["schedule", "value", "distance"], "schedule_distance")
    if not (isinstance(exact_below, (int, float)) and exact_below > 0):
        fail("exact_below", exact_below, "must be a positive number")
    fig, axes = new_figure(2 if positions else 1)
    schedules = in_order(sweeps["schedule"])
    palette = dict(zip(schedules, sns.color_palette("deep", n_colors=len(schedules))))
    ax = axes[0]
    chosen_ones = [schedule for schedule in schedules if selected and schedule in selected]
    for i, schedule in enumerate(schedules):  # a marker each, the first widest: points at one place all show
        rows = sweeps[sweeps["schedule"] == schedule].sort_values("value")
        log_line(ax, rows["value"].astype(float), rows["distance"], "-", marker=MARKERS[i % len(MARKERS)],
                 ms=max(3, 6 - i), color=palette[schedule], label=f"{schedule} ({knob_symbol(schedule)})")
        if schedule in chosen_ones:  # a ring in the schedule's colour, each a size of its own: two at one x both show
            chosen = rows[rows["value"] == selected[schedule]]
            ax.plot(chosen["value"].astype(float), positive_only(chosen["distance"]), "o",
                    ms=11 + 4 * chosen_ones.index(schedule), mfc="none", mec=palette[schedule], mew=1.5)
    if chosen_ones:
        ax.plot([], [], "o", ms=10, mfc="none", mec="black", mew=1.5, label="selected setting")
    ax.set(xlabel="K passes / S subsets / B block length", ylabel="||L - L*|| / ||L*||  (L* = sequential)",
           yscale="log")
    ax.set_title("distance to the exact logits, by knob", fontsize=10)
    handles, labels = ax.get_legend_handles_labels()  # below the panels: inside, it covered the drop at S = T
    fig.legend(handles, labels, fontsize=8, loc="outside lower center", ncols=min(len(labels), 4))
    if positions:
        ax = axes[1]
        prefixes = []
        for i, (label, frame) in enumerate(positions.items()):
            require_columns(frame, ["position", "distance"], "schedule_distance positions")
            color = palette.get(label.split("(")[0])
            # the first drawn widest, a marker each: exact multipass points under interleaved ones keep a rim
            log_line(ax, frame["position"], frame["distance"], "-", marker=MARKERS[i % len(MARKERS)],
                     ms=max(3, 8 - 2 * i), color=color, label=label)
            wrong = frame.loc[frame["distance"].to_numpy(dtype=float) >= exact_below, "position"]
            prefixes.append(f"{label} t < {int(wrong.min())}" if len(wrong) else f"{label} everywhere")
        ax.set(xlabel="position t", ylabel="distance at position t", yscale="log")
        ax.set_title(textwrap.fill(f"exact (< {exact_below:g}) only at " + ", ".join(prefixes), 55), fontsize=9)
        ax.legend(fontsize=8)
    title = schedule_takeaway(sweeps, exact_below) if title is None else title
    if title:
        fig.suptitle(title, fontsize=10)
    return fig

"""Figures of schedules and decoding regimes: how far an approximate schedule is from the exact recurrence."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from ..decode import REGIMES
from ..schedules import VALUES as SCHEDULE_VALUES
from .base import (
    in_order,
    log_line,
    new_figure,
    positive_only,
    require_columns,
)


def jacobi_settling(frame: pd.DataFrame, exact_below: float = 1e-9) -> Figure:
    """``jacobi_errors`` as a pass x position map; cells below ``exact_below`` are white and outlined, so the
    staircase (pass k exact at t < k) shows whatever the model."""
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
    ax.grid(False)
    ax.set(xlabel="position t", ylabel="pass k", title=f"pass k is exact at positions t < k (white: < {exact_below:g})")
    fig.colorbar(image, ax=ax, label="log10 ||H^k_t - H*_t|| / ||H*_t||")
    return fig


def regime_losses(frame: pd.DataFrame) -> Figure:
    """Next-token loss per position, a line per decoding regime labelled with its mean: a regime that helps a few
    positions is told from one that helps throughout."""
    require_columns(frame, ["regime", "position", "loss"], "regime_losses")
    fig, (ax,) = new_figure(1, panel=(7.0, 3.6))
    regimes = in_order(frame["regime"])
    order = [r for r in REGIMES if r in regimes] + [r for r in regimes if r not in REGIMES]
    palette = dict(zip(REGIMES, sns.color_palette("deep", n_colors=len(REGIMES))))
    for regime in order:
        rows = frame[frame["regime"] == regime].sort_values("position")
        ax.plot(rows["position"], rows["loss"], "o-", ms=3, color=palette.get(regime),
                label=f"{regime} (mean {rows['loss'].mean():.3f})")
    ax.set(xlabel="position (predicting the next token)", ylabel="loss (nats)")
    ax.legend(fontsize=8)
    return fig


def knob_symbol(schedule: str) -> str:
    """The letter of a schedule's knob (K, S, B), as its value writes it; ``value`` when it has none."""
    value = SCHEDULE_VALUES.get(schedule)
    return (value.symbol if value is not None else "") or "value"


def schedule_distance(sweeps: pd.DataFrame, positions: Mapping[str, pd.DataFrame] | None = None,
                      selected: Mapping[str, int] | None = None) -> Figure:
    """Each approximate schedule's distance to the exact logits against its knob (``schedule_sweep`` rows,
    ``selected`` ringed) and, with ``positions``, per position (multipass's exact prefix, blockwise's block edges)."""
    require_columns(sweeps, ["schedule", "value", "distance"], "schedule_distance")
    fig, axes = new_figure(2 if positions else 1)
    schedules = in_order(sweeps["schedule"])
    palette = dict(zip(schedules, sns.color_palette("deep", n_colors=len(schedules))))
    ax = axes[0]
    for schedule in schedules:
        rows = sweeps[sweeps["schedule"] == schedule].sort_values("value")
        log_line(ax, rows["value"].astype(float), rows["distance"], "o-", ms=3, color=palette[schedule],
                  label=f"{schedule} ({knob_symbol(schedule)})")
        if selected and schedule in selected:
            chosen = rows[rows["value"] == selected[schedule]]
            ax.plot(chosen["value"].astype(float), positive_only(chosen["distance"]), "o", ms=11, mfc="none",
                    mec="black", mew=1.5)
    ax.set(xlabel="K passes / S subsets / B block length", ylabel="||L - L*|| / ||L*||  (L* = sequential)",
           yscale="log", title="distance to the exact recurrence")
    ax.legend(fontsize=8)
    if positions:
        ax = axes[1]
        for label, frame in positions.items():
            require_columns(frame, ["position", "distance"], "schedule_distance positions")
            color = palette.get(label.split("(")[0])
            log_line(ax, frame["position"], frame["distance"], "o-", ms=3, color=color, label=label)
        ax.set(xlabel="position t", ylabel="distance at position t", yscale="log", title="where it is wrong")
        ax.legend(fontsize=8)
    return fig


"""Figures of the LRT mechanism itself: its gates, its KV store, one position's state as it turns."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from .base import (
    new_figure,
    require_columns,
)


def token_steps(trajectory: pd.DataFrame, position: int, example: int = 0,
                decode: Callable[[int], str] | None = None) -> Figure:
    """One position of a ``memory_trajectory``: ``cos(m_{t-1}, m_t)`` along the sequence (near 1: the token barely
    changes the state) and the position's top next-token probabilities."""
    require_columns(trajectory, ["example", "position", "token", "cosine_prev", "top_tokens", "top_probs"],
                    "token_steps")
    rows = trajectory[trajectory["example"] == example].sort_values("position")
    if rows.empty:
        raise ValueError(f"example={example!r} is invalid: the trajectory holds examples "
                         f"{sorted(trajectory['example'].unique())}")
    if position not in set(rows["position"]):
        raise ValueError(f"position={position!r} is invalid: must be in [0, {int(rows['position'].max())}]")
    row = rows[rows["position"] == position].iloc[0]
    fig, (ax_cos, ax_top) = new_figure(2)
    ax_cos.plot(rows["position"], rows["cosine_prev"], "o-", ms=3, color="tab:blue")
    ax_cos.axvline(position, color="black", lw=1, alpha=0.5)
    ax_cos.set(xlabel="position t", ylabel="cos(m_{t-1}, m_t)", ylim=(-1.05, 1.05))
    show = (lambda tok: repr(decode(int(tok)))) if decode else (lambda tok: str(int(tok)))
    ax_top.barh([show(t) for t in row["top_tokens"]][::-1], list(row["top_probs"])[::-1],
                color=sns.color_palette("deep")[0])
    ax_top.set(xlabel="probability", xlim=(0.0, 1.0), title=f"next token after {show(row['token'])} (t={position})")
    return fig


def kv_cache_step(pattern: np.ndarray, keys: np.ndarray, position: int, labels: Sequence[str] | None = None) -> Figure:
    """One decoding step seen from the cache: one head's attention ``pattern`` (T, T) and cached ``keys`` (T,
    head_dim), rows after ``position`` blank (not computed yet)."""
    pattern, keys = np.asarray(pattern, dtype=float), np.asarray(keys, dtype=float)
    T = pattern.shape[0]
    if pattern.shape != (T, T) or keys.ndim != 2 or keys.shape[0] != T:
        raise ValueError(f"pattern must be (T, T) and keys (T, head_dim); got {pattern.shape} and {keys.shape}")
    if not 0 <= position < T:
        raise ValueError(f"position={position!r} is invalid: must be in [0, {T - 1}]")
    shown = pattern.copy()
    shown[position + 1:] = np.nan
    shown[np.triu_indices(T, 1)] = np.nan  # the causal mask: never computed
    cached = keys.copy()
    cached[position + 1:] = np.nan
    fig, (ax_att, ax_k) = new_figure(2, panel=(4.6, 4.2))
    ax_att.imshow(shown, cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
    ax_att.axhspan(position - 0.5, position + 0.5, fill=False, ec="tab:red", lw=2)
    ax_att.set(xlabel="key position (in the cache)", ylabel="query position", title=f"attention, step t={position}")
    bound = float(np.nanmax(np.abs(keys))) or 1.0
    ax_k.imshow(cached, cmap="RdBu_r", vmin=-bound, vmax=bound, aspect="auto", interpolation="nearest")
    ax_k.axhline(position + 0.5, color="tab:red", lw=1.5)
    ax_k.set(xlabel="key channel", ylabel="cache slot (position)", title=f"cached keys: {position + 1} of {T} slots")
    ticks = np.arange(T)
    for ax in (ax_att, ax_k):
        ax.set_yticks(ticks, [str(s) for s in labels] if labels is not None else ticks, fontsize=7)
        ax.grid(False)
    ax_att.set_xticks(ticks[:: max(1, T // 16)], ticks[:: max(1, T // 16)], fontsize=7)
    return fig


def lrt_mechanism(stats: pd.DataFrame, gates: pd.DataFrame | None = None, title: str = "") -> Figure:
    """What an LRT model learned per layer (``lrt_layer_stats``): residual scales and mean gates (init 1), the source
    layer shaded; with ``gates`` (``lrt_gates``) the feedback gate per layer and position."""
    require_columns(stats, ["layer", "alpha", "gamma", "gate_local", "gate_feedback", "source"], "lrt_mechanism")
    show_map = gates is not None and not gates.empty
    fig, axes = new_figure(3 if show_map else 2, panel=(4.0, 3.4))
    layers = stats["layer"].to_numpy()
    for ax, columns, ylabel in ((axes[0], ("alpha", "gamma"), "residual scale"),
                                (axes[1], ("gate_local", "gate_feedback"), "mean gate (2 sigmoid)")):
        colors = sns.color_palette("deep", n_colors=2)
        for i, (column, color) in enumerate(zip(columns, colors)):
            ax.bar(layers - 0.2 + 0.4 * i, stats[column].fillna(0.0), width=0.38, color=color,
                   label=column if stats[column].notna().any() else f"{column} (not used)")
        for layer in layers[stats["source"].to_numpy(dtype=bool)]:
            ax.axvspan(layer - 0.5, layer + 0.5, color="grey", alpha=0.15, lw=0)
        ax.set_xticks(layers, [f"{int(l)}{' (source)' if s else ''}" for l, s in zip(layers, stats["source"])],
                      fontsize=8)
        ax.set(xlabel="block", ylabel=ylabel)
    axes[1].axhline(1.0, color="black", ls=":", lw=1, label="at init (2 sigmoid(0) = 1)")
    for ax in axes[:2]:
        ax.legend(fontsize=8, ncol=3, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    if show_map:
        table = gates.pivot_table(index="layer", columns="position", values="gate_feedback", sort=True)
        image = axes[2].imshow(table.to_numpy(), aspect="auto", cmap="magma", interpolation="nearest")
        axes[2].grid(False)
        axes[2].set_yticks(np.arange(len(table)), table.index)
        axes[2].set(xlabel="position t", ylabel="block", title="feedback gate")
        fig.colorbar(image, ax=axes[2])
    if title:
        fig.suptitle(title)
    return fig


"""Figures of the LRT mechanism: its gates, its KV cache, one position's state."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ..validation import fail
from .base import (
    legend_rows,
    new_figure,
    require_columns,
    shared_legend,
)


def token_steps(trajectory: pd.DataFrame, position: int, example: int = 0,
                decode: Callable[[int], str] | None = None) -> Figure:
    """``cos(m_{t-1}, m_t)`` along the trajectory (near 1: the token barely changes the state), top next tokens."""
    require_columns(trajectory, ["example", "position", "token", "cosine_prev", "top_tokens", "top_probs"],
                    "token_steps")
    rows = trajectory[trajectory["example"] == example].sort_values("position")
    if rows.empty:
        fail("example", example, f"the trajectory holds examples {sorted(trajectory['example'].unique())}")
    if position not in set(rows["position"]):
        fail("position", position, f"must be in [0, {int(rows['position'].max())}]")
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
    """Attention ``pattern`` (T, T) and cached ``keys`` (T, head_dim) up to ``position``."""
    pattern, keys = np.asarray(pattern, dtype=float), np.asarray(keys, dtype=float)
    T = pattern.shape[0]
    if pattern.shape != (T, T) or keys.ndim != 2 or keys.shape[0] != T:
        raise ValueError(f"pattern {pattern.shape} must be (T, T), keys {keys.shape} (T, head_dim)")
    if not 0 <= position < T:
        fail("position", position, f"must be in [0, {T - 1}]")
    shown = pattern.copy()
    shown[position + 1:] = np.nan
    shown[np.triu_indices(T, 1)] = np.nan  # the causal mask: never computed
    cached = keys.copy()
    cached[position + 1:] = np.nan
    fig, (ax_att, ax_k) = new_figure(2, panel=(4.6, 4.2))
    weights = ax_att.imshow(shown, cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
    fig.colorbar(weights, ax=ax_att, label="attention weight", shrink=0.8)
    ax_att.axhspan(position - 0.5, position + 0.5, fill=False, ec="tab:red", lw=2)
    ax_att.set(xlabel="key position (in the cache)", ylabel="query position", title=f"attention, step t={position}")
    bound = float(np.nanmax(np.abs(keys))) or 1.0
    values = ax_k.imshow(cached, cmap="RdBu_r", vmin=-bound, vmax=bound, aspect="auto", interpolation="nearest")
    fig.colorbar(values, ax=ax_k, label="key value (per channel)", shrink=0.8)
    ax_k.axhline(position + 0.5, color="tab:red", lw=1.5)
    ax_k.set(xlabel="key channel", ylabel="cache slot (position)", title=f"cached keys: {position + 1} of {T} slots")
    ax_k.xaxis.set_major_locator(MaxNLocator(integer=True))  # channels are whole: no tick at 2.5
    ticks = np.arange(T)
    for ax in (ax_att, ax_k):
        ax.set_yticks(ticks, [str(s) for s in labels] if labels is not None else ticks, fontsize=7)
        ax.grid(False)
    ax_att.set_xticks(ticks[:: max(1, T // 16)], ticks[:: max(1, T // 16)], fontsize=7)
    fig.suptitle(_cache_takeaway(pattern[: position + 1]), fontsize=10)
    return fig


def _cache_takeaway(rows: np.ndarray, tol: float = 1e-4) -> str:
    """Whether each computed row sums to 1 and none reads a key after its query."""
    sums = bool(np.allclose(rows.sum(-1), 1.0, atol=tol))
    ahead = float(np.abs(np.triu(rows, 1)).max()) if rows.shape[0] else 0.0
    return ("each row sums to 1" if sums else "rows do NOT sum to 1") + "; " + (
        "nothing after t is read" if ahead <= tol else f"a query reads a later key (weight {ahead:.2g})")


LRT_NAMES = {"alpha": r"$\alpha$: scale of the block's own residual", "gamma": r"$\gamma$: scale of the memory added",
             "gate_local": "gate on the token's own keys/values", "gate_feedback": "gate on the memory's keys/values"}


def gate_takeaway(stats: pd.DataFrame) -> str:
    """Blocks whose memory gate sits below the local gate, with their means."""
    require_columns(stats, ["gate_local", "gate_feedback"], "gate_takeaway")
    rows = stats.dropna(subset=["gate_local", "gate_feedback"])
    if rows.empty:
        return "no K/V injection: no gates"
    below = int((rows["gate_feedback"] < rows["gate_local"]).sum())
    return (f"the memory's gate is below the local one in {below} of {len(rows)} blocks "
            f"(mean {rows['gate_feedback'].mean():.2f} vs {rows['gate_local'].mean():.2f}; 1 at init)")


def lrt_mechanism(stats: pd.DataFrame, gates: pd.DataFrame | None = None, title: str = "",
                  gamma_init: float | None = None) -> Figure:
    """An LRT model's scales and gates per layer against init (``gamma_init``: ``lrt_gamma_init``)."""
    require_columns(stats, ["layer", "alpha", "gamma", "gate_local", "gate_feedback", "source"], "lrt_mechanism")
    if gamma_init is not None and not (isinstance(gamma_init, (int, float)) and np.isfinite(gamma_init)):
        fail("gamma_init", gamma_init, "must be a finite number or None")
    show_map = gates is not None and not gates.empty
    fig, axes = new_figure(3 if show_map else 2, panel=(4.0, 3.4))
    layers = stats["layer"].to_numpy()
    colors = sns.color_palette("deep", n_colors=4)
    for ax, columns, ylabel, pair in ((axes[0], ("alpha", "gamma"), "residual scale", colors[:2]),
                                      (axes[1], ("gate_local", "gate_feedback"), "mean gate (2 sigmoid)",
                                       colors[2:])):
        for i, (column, color) in enumerate(zip(columns, pair)):
            ax.bar(layers - 0.2 + 0.4 * i, stats[column].fillna(0.0), width=0.38, color=color,
                   label=LRT_NAMES[column] if stats[column].notna().any() else f"{LRT_NAMES[column]} (not used)")
        for layer in layers[stats["source"].to_numpy(dtype=bool)]:
            ax.axvspan(layer - 0.5, layer + 0.5, color="grey", alpha=0.15, lw=0, label="source block of the memory")
        ax.set_xticks(layers, [f"{int(l)}{' (source)' if s else ''}" for l, s in zip(layers, stats["source"])],
                      fontsize=8)
        ax.set(xlabel="block", ylabel=ylabel)
    if stats["alpha"].notna().any():
        axes[0].axhline(1.0, color=colors[0], ls=":", lw=1.5, label=r"$\alpha$ at init (1)")
    if gamma_init is not None and stats["gamma"].notna().any():
        axes[0].axhline(gamma_init, color=colors[1], ls="--", lw=1.5, label=rf"$\gamma$ at init ({gamma_init:g})")
    axes[1].axhline(1.0, color="black", ls=":", lw=1, label="gates at init (2 sigmoid(0) = 1)")
    if show_map:
        table = gates.pivot_table(index="layer", columns="position", values="gate_feedback", sort=True)
        image = axes[2].imshow(table.to_numpy(), aspect="auto", cmap="magma", interpolation="nearest")
        axes[2].grid(False)
        axes[2].set_yticks(np.arange(len(table)), table.index)
        axes[2].set(xlabel="position t", ylabel="block", title="memory's gate, per position")
        fig.colorbar(image, ax=axes[2], label="gate on the memory's K/V (1 at init)")
    entries = dict(zip(*reversed(shared_legend(axes[:2]))))  # label -> handle
    scales = [label for label in entries if label.startswith((r"$\alpha$", r"$\gamma$"))]
    scales.sort(key=lambda label: (not label.startswith(r"$\alpha$"), "at init" in label))
    rest = [label for label in entries if label not in scales]
    rest.sort(key=lambda label: (label.startswith("source"), "at init" in label))  # gates, init, source
    ncols = 4 if show_map else 2  # a row of the legend per panel: each scale beside its init, the gates together
    handles, labels = legend_rows([[(entries[k], k) for k in scales], [(entries[k], k) for k in rest]], ncols)
    fig.legend(handles, labels, fontsize=8, loc="outside lower center", ncols=ncols, frameon=False)
    if title:
        fig.suptitle(title)
    return fig

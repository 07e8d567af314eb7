"""Shared figure helpers: pyplot-free figures (``savefig`` on any backend), panel grids, log axes that show zeros."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, NullLocator, StrMethodFormatter

from ..decode import REGIMES
from ..validation import fail

Runs = pd.DataFrame | Mapping[str, pd.DataFrame]


STYLE = "whitegrid"


PANEL = (4.8, 3.6)  # inches per panel


MAX_COLUMNS = 3  # panels per row: three 4-inch panels fill a notebook cell at 80 dpi
DIFFERENCE_HEIGHT = 2.0  # inches: the difference panel under a main one
MAX_WIDTH = 12.0  # inches: a JupyterLab cell is ~1220 px and figures are drawn at 100 dpi; wider ones are shrunk
SQUEEZE = 0.8  # a row too wide by at most this share narrows its panels; wider, it wraps into more rows


def fit_row(ncols: int, width: float, wrap: bool = True) -> tuple[int, float]:
    """(columns, panel width) fitting ``ncols`` panels ``width`` inches wide within ``MAX_WIDTH``: slightly too wide
    narrows them, far too wide (``wrap``) drops columns."""
    if ncols * width <= MAX_WIDTH:
        return ncols, width
    if ncols * width * SQUEEZE <= MAX_WIDTH or not wrap:
        return ncols, MAX_WIDTH / ncols
    columns = max(1, int(MAX_WIDTH // (width * SQUEEZE)))
    return columns, min(width, MAX_WIDTH / columns)


def new_figure(ncols: int, nrows: int = 1, panel: tuple[float, float] = PANEL,
               sharey: bool = False) -> tuple[Figure, list[Axes]]:
    """A pyplot-free figure and a flat list of its ``ncols * nrows`` axes within ``MAX_WIDTH`` (``fit_row``): a row
    too wide wraps (``fig.axes`` still holds ``ncols``), a grid narrows."""
    columns, width = fit_row(ncols, panel[0], wrap=nrows == 1)
    rows = -(-ncols // columns) if nrows == 1 else nrows
    with sns.axes_style(STYLE):
        fig = Figure(figsize=(width * columns, panel[1] * rows), layout="constrained")
        axes = list(fig.subplots(rows, columns, squeeze=False, sharey=sharey).flat)
    for ax in axes[ncols * nrows:]:
        ax.remove()
    return fig, axes[:ncols * nrows]


def panel_grid(n: int, panel: tuple[float, float], sharey: bool = False,
               ncols: int | None = None) -> tuple[Figure, list[Axes]]:
    """``n`` panels, at most ``ncols`` a row (and ``MAX_WIDTH`` wide); ``fig.axes`` holds exactly ``n``."""
    ncols = min(n, MAX_COLUMNS, ncols or MAX_COLUMNS)
    columns, width = fit_row(ncols, panel[0])
    fig, axes = new_figure(columns, -(-n // columns), panel=(width, panel[1]), sharey=sharey)
    for ax in axes[n:]:
        ax.remove()
    return fig, axes[:n]


def legend_rows(groups: Sequence[Sequence[tuple]], ncols: int) -> tuple[list, list[str]]:
    """Legend entries in ``ncols`` columns read row by row, each (handle, label) group from a new row: never a run
    beside an unrelated key."""
    entries: list[tuple] = []
    for group in groups:
        if not group:
            continue
        if entries and len(entries) % ncols:
            entries += [(Line2D([], [], ls="none"), "")] * (ncols - len(entries) % ncols)
        entries += list(group)
    return row_major([h for h, _ in entries], [label for _, label in entries], ncols)


def with_difference(width: float, height: float, difference: bool) -> tuple[Figure, Axes, Axes | None]:
    """A main panel and, when ``difference``, a shorter one under it on the same x axis: curves that differ by
    less than their line width read apart as their difference from a reference."""
    with sns.axes_style(STYLE):
        if not difference:
            fig = Figure(figsize=(width, height), layout="constrained")
            return fig, fig.subplots(), None
        fig = Figure(figsize=(width, height + DIFFERENCE_HEIGHT), layout="constrained")
        main, below = fig.subplots(2, 1, sharex=True, height_ratios=(height, DIFFERENCE_HEIGHT))
    main.tick_params(labelbottom=True)  # the main panel keeps its numbers: it is read on its own
    return fig, main, below



def zero_line(ax: Axes, color="black", label: str | None = None) -> None:
    """The difference panel's reference: no difference."""
    ax.axhline(0.0, color=color, lw=1.2, ls="-", zorder=1, label=label)


def row_major(handles: Sequence, labels: Sequence[str], ncols: int) -> tuple[list, list[str]]:
    """Legend entries reordered so matplotlib's column-major fill reads row by row: entries given together stand
    side by side."""
    n = len(labels)
    if ncols <= 1 or n <= ncols:
        return list(handles), list(labels)
    rows = -(-n // ncols)
    order = [r * ncols + c for c in range(ncols) for r in range(rows) if r * ncols + c < n]
    return [handles[i] for i in order], [labels[i] for i in order]


def shared_legend(axes: Sequence[Axes]) -> tuple[list, list[str]]:
    """Every labelled artist of ``axes`` once (first drawn wins)."""
    entries: dict = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    return list(entries.values()), list(entries)


def require_columns(df: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what} needs columns {list(columns)}; missing {missing} (has {list(df.columns)})")
    if df.empty:
        raise ValueError(f"{what} got an empty DataFrame")


def named_runs(results: Runs, what: str, columns: Sequence[str]) -> dict[str, pd.DataFrame]:
    """One DataFrame or a dict of them as {name: frame}, each with ``columns``; a lone frame is named ''."""
    runs = {"": results} if isinstance(results, pd.DataFrame) else dict(results)
    if not runs:
        raise ValueError(f"{what} got no runs")
    for frame in runs.values():
        require_columns(frame, columns, what)
    return runs


def positive_only(values: pd.Series) -> np.ndarray:
    """Values for a log axis: zeros become gaps, not -inf."""
    arr = values.to_numpy(dtype=float)
    return np.where(arr > 0, arr, np.nan)


ZERO_LABEL = "▼ on the axis: exactly 0"


def log_line(ax: Axes, x, y: pd.Series, *args, **kwargs) -> bool:
    """Plot ``y`` on a log axis, exact zeros as ▼ on the bottom edge; returns whether any was marked."""
    (line,) = ax.plot(x, positive_only(y), *args, **kwargs)
    zeros = y.to_numpy(dtype=float) == 0
    if zeros.any():
        marked = ZERO_LABEL in ax.get_legend_handles_labels()[1]
        ax.scatter(np.asarray(x, dtype=float)[zeros], np.zeros(int(zeros.sum())), marker="v", s=22,
                   color=line.get_color(), clip_on=False, zorder=4, transform=ax.get_xaxis_transform(),
                   label=None if marked else ZERO_LABEL)
    return bool(zeros.any())


LOG_TICKS = (1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)


def log_count_axis(ax: Axes, last: float) -> None:
    """Log x axis over counts from 1, integer ticks: passes 2-3 stay as wide as 50-100."""
    ax.set_xscale("log")
    ax.set_xlim(1 / 1.1, last * 1.1)
    ax.xaxis.set_major_locator(FixedLocator([t for t in LOG_TICKS if t <= last]))
    ax.xaxis.set_major_formatter(StrMethodFormatter("{x:.0f}"))
    ax.xaxis.set_minor_locator(NullLocator())


ARMS_PER_PANEL = 6  # past this a reader cannot tell the arms apart


MARKERS = ("o", "s", "^", "D", "v", "P")  # one per series of a panel: lines that coincide still show each marker


def split_panels(name: str, items: Sequence) -> list[tuple[str, Sequence]]:
    """``items`` in equal parts of at most ``ARMS_PER_PANEL``, titled ``"name (k/n)"`` when cut."""
    parts = -(-len(items) // ARMS_PER_PANEL)
    size = -(-len(items) // parts)
    return [(name if parts == 1 else f"{name} ({k + 1}/{parts})", items[k * size:(k + 1) * size])
            for k in range(parts)]


def run_styles(names: Sequence[str]) -> dict[str, dict]:
    """A colour per arm, a line style per seed (``<arm>_s<seed>``)."""
    arms = [re.sub(r"_s\d+$", "", name) for name in names]
    colors = dict(zip(in_order(arms), sns.color_palette("deep", n_colors=len(set(arms)))))
    return {name: {"color": colors[arm], "ls": ("-", "--", ":", "-.")[arms[:i].count(arm) % 4]}
            for i, (name, arm) in enumerate(zip(names, arms))}


def name_colours(names: Sequence) -> dict:
    """A colour per name in sorted order: a name keeps its colour whatever the row order."""
    unique = sorted(set(names), key=str)
    return dict(zip(unique, sns.color_palette("deep", n_colors=len(unique))))


def probe_facets(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """Probe results as (title, rows) panels by task and model."""
    keys = [c for c in ("task", "model") if c in df.columns and df[c].nunique() > 1]
    if not keys:
        return [(" / ".join(str(df[c].iloc[0]) for c in ("task", "model") if c in df.columns), df)]
    return [(key_label(key), group) for key, group in df.groupby(keys, sort=False)]


def key_label(key) -> str:
    """A groupby key (one value or a tuple of them) as a panel or line label."""
    return " / ".join(map(str, key if isinstance(key, tuple) else (key,)))


def empty_panel(ax: Axes, text: str) -> None:
    """A panel with nothing to draw says why in its middle."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=9, wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def in_order(values: Sequence) -> list:
    """Unique values in order of first appearance (the caller's order is meaningful)."""
    return list(dict.fromkeys(values))



def regime_order(values: Sequence[str]) -> list[str]:
    """The regimes present: decode's in their fixed order, then others as they appear."""
    present = in_order(values)
    return [r for r in REGIMES if r in present] + [r for r in present if r not in REGIMES]


def settled_from(close: np.ndarray) -> int | None:
    """Index from which every ``close`` holds to the end (None: the last does not)."""
    if not close[-1]:
        return None
    k = len(close) - 1
    while k > 0 and close[k - 1]:
        k -= 1
    return k


def check_chance(chance: float | None) -> None:
    if chance is not None and not (isinstance(chance, (int, float)) and 0.0 <= chance <= 1.0):
        fail("chance", chance, "must be an accuracy in [0, 1] or None")

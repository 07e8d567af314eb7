"""What every figure module shares: a pyplot-free figure in seaborn's style, panel grids, log axes that show exact
zeros, one colour per arm, and column checks that turn a wrong table into a clear error. Without ``pyplot`` nothing
is registered globally: nothing needs closing, no figure shows twice in a notebook, ``savefig`` works on any backend."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure

Runs = pd.DataFrame | Mapping[str, pd.DataFrame]


STYLE = "whitegrid"


PANEL = (4.8, 3.6)  # inches per panel


MAX_COLUMNS = 3  # panels per row: at 80 dpi three 4-inch panels fill a notebook cell (~960 px) and stay legible


def new_figure(ncols: int, nrows: int = 1, panel: tuple[float, float] = PANEL,
            sharey: bool = False) -> tuple[Figure, list[Axes]]:
    """A pyplot-free figure with seaborn's style and a flat list of its axes."""
    with sns.axes_style(STYLE):
        fig = Figure(figsize=(panel[0] * ncols, panel[1] * nrows), layout="constrained")
        axes = fig.subplots(nrows, ncols, squeeze=False, sharey=sharey)
    return fig, list(axes.flat)


def panel_grid(n: int, panel: tuple[float, float], sharey: bool = False,
               ncols: int | None = None) -> tuple[Figure, list[Axes]]:
    """``n`` panels in rows of at most ``ncols`` (default and cap ``MAX_COLUMNS``), unused cells removed
    (``fig.axes`` holds exactly ``n``)."""
    ncols = min(n, MAX_COLUMNS, ncols or MAX_COLUMNS)
    fig, axes = new_figure(ncols, -(-n // ncols), panel=panel, sharey=sharey)
    for ax in axes[n:]:
        ax.remove()
    return fig, axes[:n]


def shared_legend(axes: Sequence[Axes]) -> tuple[list, list[str]]:
    """Every labelled artist of ``axes`` once (first drawn wins): one legend for panels that share entries."""
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


def named_runs(results: Runs, what: str) -> dict[str, pd.DataFrame]:
    """One DataFrame or a dict of them as {name: frame}; a lone frame is named ''."""
    runs = {"": results} if isinstance(results, pd.DataFrame) else dict(results)
    if not runs:
        raise ValueError(f"{what} got no runs")
    return runs


def positive_only(values: pd.Series) -> np.ndarray:
    """Values for a log axis: zeros (an exact fixed point, an unused memory) become gaps, not -inf."""
    arr = values.to_numpy(dtype=float)
    return np.where(arr > 0, arr, np.nan)


ZERO_LABEL = "▼ on the axis: exactly 0"


def log_line(ax: Axes, x, y: pd.Series, *args, **kwargs) -> bool:
    """Plot ``y`` on a log axis, exact zeros (which a log axis cannot show) as ▼ on the bottom edge; returns whether
    any was marked (labelled ``ZERO_LABEL`` once per axes)."""
    (line,) = ax.plot(x, positive_only(y), *args, **kwargs)
    zeros = y.to_numpy(dtype=float) == 0
    if zeros.any():
        marked = ZERO_LABEL in ax.get_legend_handles_labels()[1]
        ax.scatter(np.asarray(x, dtype=float)[zeros], np.zeros(int(zeros.sum())), marker="v", s=22,
                   color=line.get_color(), clip_on=False, zorder=4, transform=ax.get_xaxis_transform(),
                   label=None if marked else ZERO_LABEL)
    return bool(zeros.any())


LOG_TICKS = (1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)


def log_count_axis(ax: Axes, last: float, first: float = 1) -> None:
    """A log x axis over counts from ``first`` to ``last``, integer ticks: the trained passes 2-3 stay as wide as
    50-100."""
    from matplotlib.ticker import FixedLocator, NullLocator, StrMethodFormatter

    ax.set_xscale("log")
    ax.set_xlim(first / 1.1, last * 1.1)
    ax.xaxis.set_major_locator(FixedLocator([t for t in LOG_TICKS if first <= t <= last]))
    ax.xaxis.set_major_formatter(StrMethodFormatter("{x:.0f}"))
    ax.xaxis.set_minor_locator(NullLocator())


ARMS_PER_PANEL = 6  # more arms than this in one panel and a reader cannot tell them apart


def split_panels(name: str, items: Sequence) -> list[tuple[str, Sequence]]:
    """``items`` in equal parts of at most ``ARMS_PER_PANEL``, each titled ``name`` (``"name (k/n)"`` when cut)."""
    parts = -(-len(items) // ARMS_PER_PANEL)
    size = -(-len(items) // parts)
    return [(name if parts == 1 else f"{name} ({k + 1}/{parts})", items[k * size:(k + 1) * size])
            for k in range(parts)]


def run_styles(names: Sequence[str]) -> dict[str, dict]:
    """A colour per arm and a line style per seed: runs ``<arm>_s<seed>`` share their arm's colour."""
    import re

    arms = [re.sub(r"_s\d+$", "", name) for name in names]
    colors = dict(zip(in_order(pd.Series(arms)), sns.color_palette("deep", n_colors=len(set(arms)))))
    styles, seen = {}, {}
    for name, arm in zip(names, arms):
        k = seen[arm] = seen.get(arm, -1) + 1
        styles[name] = {"color": colors[arm], "ls": ("-", "--", ":", "-.")[k % 4]}
    return styles


def name_colours(names: Sequence) -> dict:
    """One colour per distinct name, assigned in sorted order: the same names get the same colours in every figure,
    whatever order the rows come in. Past ten names the palette repeats, so only names ten apart in sorted order
    share a colour (never neighbours, which a panel of one arm's specimens holds)."""
    unique = sorted(set(names), key=str)
    return dict(zip(unique, sns.color_palette("deep", n_colors=len(unique))))


def probe_facets(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """Split probe results into panels by task and model (whichever of the two columns exist)."""
    keys = [c for c in ("task", "model") if c in df.columns and df[c].nunique() > 1]
    if not keys:
        return [(" / ".join(str(df[c].iloc[0]) for c in ("task", "model") if c in df.columns), df)]
    return [(" / ".join(map(str, key if isinstance(key, tuple) else (key,))), group)
            for key, group in df.groupby(keys, sort=False)]


def empty_panel(ax: Axes, text: str) -> None:
    """A panel with nothing to draw says why in its middle (rather than standing blank)."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=9, wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def in_order(values: pd.Series) -> list:
    """Unique values in order of first appearance: the caller's order of conditions is meaningful."""
    return list(dict.fromkeys(values))


"""Figures of training runs: loss against steps, tokens, FLOPs or wall-clock."""

from __future__ import annotations

import io
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ..files import write_bytes_atomic
from ..validation import check_int, fail
from .base import (
    STYLE,
    Runs,
    named_runs,
    new_figure,
    panel_grid,
    require_columns,
    shared_legend,
    with_difference,
    zero_line,
)

LOSS_AXES = {"step": "optimiser step", "flops": "training FLOPs", "tokens": "training tokens"}


def floor_line(ax: Axes, floor: float | None, label: str, autoscale: bool = True) -> None:
    """Loss without context, dotted; ``autoscale=False`` leaves the y limits to the data."""
    if floor is None:
        return
    if autoscale:
        ax.axhline(floor, color="grey", ls=":", lw=1.5, label=f"{label} {floor:.3f}")
    else:  # not a data limit: a floor far above the points does not squash them
        ax.add_artist(Line2D([0, 1], [floor, floor], transform=ax.get_yaxis_transform(), color="grey", ls=":",
                             lw=1.5, label=f"{label} {floor:.3f}"))


def check_floor(floor: float | None) -> None:
    if floor is not None and not (isinstance(floor, (int, float)) and np.isfinite(floor)):
        fail("floor", floor, "must be a finite number or None")


def loss_curves(history: Runs, x: str = "step", title: str = "", floor: float | None = None,
                floor_label: str = "unigram", reference: str | None = None, difference: bool = True) -> Figure:
    """Training and held-out loss against ``x``; ``"flops"``: the matched-compute test a K-pass schedule must pass.
    ``difference``: a panel below of each run minus ``reference`` (default the first; one run: each pass minus
    pass 1), as in ``with_difference``."""
    if x not in LOSS_AXES:
        fail("x", x, f"must be one of {tuple(LOSS_AXES)}")
    check_floor(floor)
    runs = named_runs(history, "loss_curves", [x, "loss"])
    if reference is not None and (len(runs) == 1 or reference not in runs):
        fail("reference", reference, f"must name one of several runs {list(runs)}")
    gaps = _loss_gaps(runs, x, reference) if difference else {}
    fig, ax, below = with_difference(6.5, 4.2, bool(gaps))
    if len(runs) == 1:
        (frame,) = runs.values()
        ax.plot(frame[x], frame["loss"], color="black", label="train objective")
        pass_cols = _pass_columns(frame)
        colours = dict(zip(pass_cols, sns.color_palette("deep", n_colors=len(pass_cols))))
        if len(pass_cols) > 1:
            for col, color in colours.items():
                ax.plot(frame[x], frame[col], lw=1, alpha=0.7, color=color,
                        label=_pass_label(col))
        if "val_loss" in frame and frame["val_loss"].notna().any():
            val = frame.dropna(subset=["val_loss"])
            ax.plot(val[x], val["val_loss"], "o-", ms=4, color="tab:red", label="held-out")
        colour_of = {_pass_label(c): colour for c, colour in colours.items()}
    else:
        colour_of = dict(zip(runs, sns.color_palette("deep", n_colors=len(runs))))
        for name, frame in runs.items():
            color = colour_of[name]
            ax.plot(frame[x], frame["loss"], color=color, label=f"{name} train")
            if "val_loss" in frame and frame["val_loss"].notna().any():
                val = frame.dropna(subset=["val_loss"])
                ax.plot(val[x], val["val_loss"], "o--", ms=4, color=color, label=f"{name} held-out")
    floor_line(ax, floor, floor_label)
    ax.set(xlabel="" if below else LOSS_AXES[x], ylabel="loss (nats / token)", title=title)
    outside = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "frameon": False} if below else {}
    ax.legend(fontsize=8, **outside)  # beside both panels when there are two: never on the zero line
    if below is not None:
        base = next(iter(gaps.values()))[0]
        zero_line(below, colour_of.get(base, "black"), label=f"{base} (0)")
        for label, (_, kind, run, gap) in gaps.items():
            style = {"ls": "--", "marker": "o", "ms": 3} if kind == "held-out" else {"lw": 1}
            below.plot(gap.index, gap.to_numpy(), color=colour_of.get(run), **style,
                       label=f"{label} (last {gap.iloc[-1]:+.3f})")
        below.set(xlabel=LOSS_AXES[x], ylabel=f"minus {base}\n(nats / token)")
        below.legend(fontsize=8, **outside)
    for axis in (ax, below):
        if axis is not None and x != "step":
            axis.ticklabel_format(axis="x", style="sci", scilimits=(0, 0))
    return fig


def _pass_columns(frame: pd.DataFrame) -> list[str]:
    return [c for c in frame.columns if c.startswith("loss_pass")]


def _pass_label(column: str) -> str:
    """"pass k" for the history column ``loss_passk``."""
    return f"pass {column.removeprefix('loss_pass')}"


def _loss_gaps(runs: Mapping[str, pd.DataFrame], x: str, reference: str | None
               ) -> dict[str, tuple[str, str, str, pd.Series]]:
    """{label: (reference, "train" or "held-out", run or pass, it minus the reference by ``x``)} at the ``x``
    both logged."""
    def minus(frame: pd.DataFrame, column: str, base: pd.DataFrame, base_column: str) -> pd.Series:
        a = frame.dropna(subset=[column]).groupby(x)[column].mean()
        b = base.dropna(subset=[base_column]).groupby(x)[base_column].mean()
        return (a - b).dropna()

    gaps = {}
    if len(runs) == 1:
        (frame,) = runs.values()
        columns = [c for c in _pass_columns(frame) if frame[c].notna().any()]
        if len(columns) < 2 or "loss_pass1" not in columns:
            return {}
        for column in columns[1:]:
            gap = minus(frame, column, frame, "loss_pass1")
            if len(gap):
                name = _pass_label(column)
                gaps[name] = ("pass 1", "train", name, gap)
        return gaps
    base_name = reference if reference is not None else next(iter(runs))
    base = runs[base_name]
    for name, frame in runs.items():
        if name == base_name:
            continue
        for column, kind in (("loss", "train"), ("val_loss", "held-out")):
            if column in frame and column in base and frame[column].notna().any():
                gap = minus(frame, column, base, column)
                if len(gap):
                    gaps[name if kind == "train" else f"{name} {kind}"] = (base_name, kind, name, gap)
    return gaps


CURVE_AXES = {"flops": "training FLOPs", "seconds": "training wall-clock (s)"}
COLUMN_NAMES = {"val_bpb": "bits per byte", "val_loss": "loss (nats / token)", "bpb": "bits per byte"}


def final_marks(curves: Mapping[str, Sequence[pd.DataFrame]], column: str = "val_bpb") -> dict[str, float]:
    """Per arm the seed mean of ``column`` at the last mark all seeds reached."""
    if not curves or any(len(seeds) == 0 for seeds in curves.values()):
        raise ValueError("curves must map each arm to at least one history")
    ends = {}
    for arm, seeds in curves.items():
        for frame in seeds:
            require_columns(frame, [column], "final_marks")
        n = min(len(frame) for frame in seeds)
        ends[arm] = float(np.mean([frame[column].to_numpy()[n - 1] for frame in seeds]))
    return ends


def ends_title(curves: Mapping[str, Sequence[pd.DataFrame]], column: str = "val_bpb", lead: str = "") -> str:
    """Lowest-ending arm, or a tie when seed ranges overlap: no arm crowned inside the spread."""
    ends = final_marks(curves, column)
    spans = {arm: [frame[column].to_numpy()[min(len(f) for f in seeds) - 1] for frame in seeds]
             for arm, seeds in curves.items()}
    best = min(ends, key=ends.__getitem__)
    unit = COLUMN_NAMES.get(column, column)
    tied = [arm for arm in ends if arm != best and min(spans[arm]) <= max(spans[best])]
    if tied:
        said = ", ".join(f"{arm} {ends[arm]:.3f}" for arm in sorted([best, *tied], key=ends.__getitem__))
        others = ", ".join(f"{arm} {value:.3f}" for arm, value in ends.items() if arm != best and arm not in tied)
        return (f"{lead}tie within the seed spread: {said} {unit}" + (f" ({others})" if others else "")
                + " at the last mark")
    others = ", ".join(f"{arm} {value:.3f}" for arm, value in ends.items() if arm != best)
    return (f"{lead}{best} ends lowest, {ends[best]:.3f} {unit}" + (f" ({others})" if others else "")
            + " at the last mark")


def loss_vs_flops(curves: Mapping[str, Sequence[pd.DataFrame]], floor: float | None = None,
                  floor_label: str = "unigram", column: str = "val_bpb", x: str | Sequence[str] = "flops",
                  title: str = "", extra_panel: bool = False) -> Figure:
    """Held-out ``column`` against FLOPs or wall-clock, seed mean and range per arm."""
    axes_x = [x] if isinstance(x, str) else list(x)
    for key in axes_x:
        if key not in CURVE_AXES:
            fail("x", key, f"must be one of {tuple(CURVE_AXES)}")
    if not curves or any(len(seeds) == 0 for seeds in curves.values()):
        raise ValueError("curves must map each arm to at least one history")
    check_floor(floor)
    fig, axes = new_figure(len(axes_x) + int(extra_panel), panel=(5.6, 4.0))
    for (arm, seeds), color in zip(curves.items(), sns.color_palette("deep", n_colors=len(curves))):
        for frame in seeds:
            require_columns(frame, [*axes_x, column], "loss_vs_flops")
        n = min(len(frame) for frame in seeds)
        values = np.stack([frame[column].to_numpy()[:n] for frame in seeds])
        for key, ax in zip(axes_x, axes):
            at = np.mean([frame[key].to_numpy()[:n] for frame in seeds], axis=0)
            ax.plot(at, values.mean(0), "o-", ms=3, color=color, label=f"{arm} ({len(seeds)} seeds)")
            if len(seeds) > 1:
                ax.fill_between(at, values.min(0), values.max(0), color=color, alpha=0.25, lw=0)
    for key, ax in zip(axes_x, axes):
        floor_line(ax, floor, floor_label)
        ax.set(xlabel=CURVE_AXES[key], ylabel=f"held-out {COLUMN_NAMES.get(column, column)}")
        if key == "flops":
            ax.ticklabel_format(axis="x", style="sci", scilimits=(0, 0))
        ax.legend(fontsize=8)
    if title:  # over every panel: a takeaway is about the figure, not its first panel
        fig.suptitle(title, fontsize=11) if len(axes) > 1 else axes[0].set_title(title)
    if extra_panel:  # the caller's points set the y range: the floor shows only where it falls inside it
        floor_line(axes[-1], floor, floor_label, autoscale=False)
    return fig


def pass_losses(histories: Runs, floor: float | None = None, floor_label: str = "unigram",
                title: str = "", difference: bool = False) -> Figure:
    """Each pass's loss against step, a panel per run: pass-3 density is the 3-pass share; ``difference`` adds a
    ``difference_panel``."""
    check_floor(floor)
    runs = named_runs(histories, "pass_losses", ["step", "loss_pass1"])
    fig, axes = panel_grid(len(runs) + difference, panel=(4.0, 3.2))
    if difference:
        gaps, axes = axes[-1], axes[:-1]
    for ax in axes[1:]:  # one loss scale for every run (not for the differences)
        ax.sharey(axes[0])
    columns = sorted({c for f in runs.values() for c in f.columns if c.startswith("loss_pass")},
                     key=lambda c: int(c.removeprefix("loss_pass")))
    palette = dict(zip(columns, sns.color_palette("deep", n_colors=len(columns))))
    for ax, (name, frame) in zip(axes, runs.items()):
        counts = {}
        for column in columns:
            if column in frame and frame[column].notna().any():
                rows = frame.dropna(subset=[column])
                counts[column.removeprefix("loss_pass")] = len(rows)
                ax.plot(rows["step"], rows[column], "o", ms=3, alpha=0.7, color=palette[column],
                        label=_pass_label(column))
        floor_line(ax, floor, floor_label)
        ax.set(xlabel="optimiser step", ylabel="training loss (nats / token)")
        ax.set_title(f"{name}\nlogged steps: " + ", ".join(f"pass {k} {n}" for k, n in counts.items()), fontsize=9)
    if difference:
        difference_panel(gaps, runs, columns, palette)
    handles, labels = shared_legend(axes)  # below the panels: inside, it sat on the floor line and the points
    order = sorted(range(len(labels)), key=lambda i: (not labels[i].startswith("pass "), labels[i]))  # passes first
    fig.legend([handles[i] for i in order], [labels[i] for i in order], fontsize=8, loc="outside lower center",
               ncols=min(len(labels), 4))
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def difference_panel(ax: Axes, runs: Mapping[str, pd.DataFrame], columns: list[str], palette: Mapping) -> None:
    """Pass k - pass 1 at each step that logged both (one batch: a gain below the batch noise shows), running mean
    of 10. The y range fits the second half of each series of >= 10 points, and 0: the jump as the feedback starts
    (up to a nat) would flatten the final gain of hundredths; the title counts the points off the scale."""
    every, late = [], []
    for (name, frame), marker in zip(runs.items(), "os^vD<>"):
        for column in columns[1:]:
            both = frame.dropna(subset=["loss_pass1", column]) if column in frame else frame.iloc[:0]
            if len(both):
                gap = both[column] - both["loss_pass1"]
                running = gap.rolling(10, min_periods=min(10, len(gap))).mean()
                colour = palette[column]
                ax.plot(both["step"], gap, marker, ms=3, alpha=0.35, color=colour,
                        label=f"{name}, {_pass_label(column)} (last {min(10, len(gap))}: "
                              f"{gap.tail(10).mean():+.3f})")
                ax.plot(both["step"], running, "-", lw=1.2, color=colour)
                every.append(gap.to_numpy())
                if len(gap) >= 10:
                    late += [gap.to_numpy()[len(gap) // 2:], running.to_numpy()[len(gap) // 2:]]
    zero_line(ax)
    clipped = ""
    if every:
        points = np.concatenate(every)
        shown = np.concatenate([*(late or every), [0.0]])
        low, high = np.nanmin(shown), np.nanmax(shown)
        pad = 0.15 * (high - low or 1.0)
        low, high = low - pad, high + pad
        ax.set_ylim(low, high)
        outside = int(((points < low) | (points > high)).sum())
        clipped = f" ({outside} of {points.size} points off the scale)" if outside else ""
    ax.set(xlabel="optimiser step", ylabel="pass k - pass 1 (nats / token)")
    ax.set_title(f"same step, same batch; line: mean of 10\nbelow 0, the feedback pays{clipped}", fontsize=9)
    ax.legend(fontsize=7)


class LossFigure:
    """``train`` callback writing ``loss_curves`` to ``path`` every ``every`` rows (0: at the end)."""

    def __init__(self, path: str | os.PathLike, title: str = "", every: int = 0, dpi: int = 100) -> None:
        check_int("every", every, 0)
        check_int("dpi", dpi, 10, 1200)
        self.path, self.title, self.every, self.dpi = Path(path), title, every, dpi
        self.rows: list[dict[str, Any]] = []

    def __call__(self, row: dict[str, Any]) -> None:
        if not self.every:  # drawn once, at the end, from the trainer's whole history
            return
        self.rows.append(row)
        if len(self.rows) % self.every == 0:
            self.write(pd.DataFrame(self.rows))

    def on_train_end(self, history: pd.DataFrame) -> None:
        """Called by ``train`` (rank 0) however the run stops."""
        self.write(history)

    def write(self, history: pd.DataFrame) -> None:
        """Draw ``history`` and swap it in atomically: a reader never sees half a PNG."""
        buffer = io.BytesIO()
        loss_curves(history, title=self.title).savefig(buffer, format=self.path.suffix.lstrip(".") or "png",
                                                        dpi=self.dpi)
        write_bytes_atomic(self.path, buffer.getvalue())


INTERVAL_WORDS = {"below": "wholly below 0", "above": "wholly above 0", "across": "contains 0"}
INTERVAL_COLOURS = {"below": "tab:blue", "above": "tab:red", "across": "grey"}


def difference_intervals(frame: pd.DataFrame, title: str = "", unit: str = "") -> Figure:
    """Paired differences as 95 % intervals against zero, a row each and a panel per ``panel``: what a verdict
    reads (levels on a scale from 0 hide a 0.05 difference). ``highlight`` rows, the claim's own, are bold."""
    require_columns(frame, ["panel", "label", "mean", "low", "high"], "difference_intervals")
    panels = list(dict.fromkeys(frame["panel"]))
    heights = [0.9 + 0.32 * int((frame["panel"] == p).sum()) for p in panels]
    with sns.axes_style(STYLE):
        fig = Figure(figsize=(9.0, sum(heights) + 0.6), layout="constrained")
        axes = fig.subplots(len(panels), 1, squeeze=False, height_ratios=heights)[:, 0]
    seen: set[str] = set()
    for ax, panel in zip(axes, panels):
        rows = frame[frame["panel"] == panel].reset_index(drop=True)
        for y, row in rows.iterrows():
            side = "below" if row["high"] < 0 else "above" if row["low"] > 0 else "across"
            ax.errorbar(row["mean"], -y, xerr=[[row["mean"] - row["low"]], [row["high"] - row["mean"]]], fmt="o",
                        color=INTERVAL_COLOURS[side], capsize=3, label=None if side in seen else INTERVAL_WORDS[side])
            seen.add(side)
        ax.axvline(0.0, color="black", lw=1.2, zorder=1)  # no difference, always in view
        low, high = min(0.0, rows["low"].min()), max(0.0, rows["high"].max())
        pad = 0.05 * (high - low or 1.0)
        ax.set_xlim(low - pad, high + pad)
        ax.set_yticks(-np.arange(len(rows)), rows["label"])
        if "highlight" in rows:
            for tick, bold in zip(ax.get_yticklabels(), rows["highlight"].astype(bool)):
                tick.set_fontweight("bold" if bold else "normal")
        ax.set_ylim(-len(rows) + 0.5, 0.5)
        ax.set_title(panel, loc="left", fontsize=9)
        ax.set_xlabel(f"difference ({unit})" if unit else "difference")
    keyed = dict(zip(*reversed(shared_legend(list(axes)))))  # label -> handle, in one order whatever came first
    labels = [word for word in INTERVAL_WORDS.values() if word in keyed]
    fig.legend([keyed[w] for w in labels], labels, fontsize=8, loc="outside lower center", ncols=len(labels),
               title="95 % interval")
    if title:
        fig.suptitle(title, fontsize=10)
    return fig

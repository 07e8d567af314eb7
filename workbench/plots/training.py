"""Figures of training runs: loss against steps, tokens, FLOPs or wall-clock, per pass, per experiment arm."""

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
from ..validation import check_int
from .base import (
    Runs,
    named_runs,
    new_figure,
    panel_grid,
    require_columns,
    shared_legend,
)

LOSS_AXES = {"step": "optimiser step", "flops": "training FLOPs", "tokens": "training tokens"}


def floor_line(ax: Axes, floor: float | None, label: str, autoscale: bool = True) -> None:
    """The loss a model without context reaches (``floor``, e.g. the unigram), dotted grey and labelled with its value;
    ``autoscale=False`` leaves the y limits to the data (drawn only where it falls inside them)."""
    if floor is None:
        return
    if autoscale:
        ax.axhline(floor, color="grey", ls=":", lw=1.5, label=f"{label} {floor:.3f}")
    else:  # not a data limit: a floor far above the points does not squash them
        ax.add_artist(Line2D([0, 1], [floor, floor], transform=ax.get_yaxis_transform(), color="grey", ls=":",
                             lw=1.5, label=f"{label} {floor:.3f}"))


def check_floor(floor: float | None, name: str = "floor") -> None:
    if floor is not None and not (isinstance(floor, (int, float)) and np.isfinite(floor)):
        raise ValueError(f"{name}={floor!r} is invalid: must be a finite number or None")


def loss_curves(history: Runs, x: str = "step", title: str = "", floor: float | None = None,
                floor_label: str = "unigram") -> Figure:
    """Training loss against ``x``, with held-out loss where recorded: for one run each pass's loss too; for several
    (a dict by name) one colour per run. With ``x="flops"`` this is the matched-compute comparison a multi-pass
    schedule (K times the work per step) has to win. ``floor``: the loss of a model without context (nats / token),
    dotted and labelled ``floor_label``."""
    if x not in LOSS_AXES:
        raise ValueError(f"x={x!r} is invalid: must be one of {tuple(LOSS_AXES)}")
    check_floor(floor)
    runs = named_runs(history, "loss_curves")
    for frame in runs.values():
        require_columns(frame, [x, "loss"], "loss_curves")
    fig, (ax,) = new_figure(1, panel=(6.5, 4.2))
    if len(runs) == 1:
        (frame,) = runs.values()
        ax.plot(frame[x], frame["loss"], color="black", label="train objective")
        pass_cols = [c for c in frame.columns if c.startswith("loss_pass")]
        if len(pass_cols) > 1:
            for col, color in zip(pass_cols, sns.color_palette("deep", n_colors=len(pass_cols))):
                ax.plot(frame[x], frame[col], lw=1, alpha=0.7, color=color, label=f"pass {col[len('loss_pass'):]}")
        if "val_loss" in frame and frame["val_loss"].notna().any():
            val = frame.dropna(subset=["val_loss"])
            ax.plot(val[x], val["val_loss"], "o-", ms=4, color="tab:red", label="held-out")
    else:
        for (name, frame), color in zip(runs.items(), sns.color_palette("deep", n_colors=len(runs))):
            ax.plot(frame[x], frame["loss"], color=color, label=f"{name} train")
            if "val_loss" in frame and frame["val_loss"].notna().any():
                val = frame.dropna(subset=["val_loss"])
                ax.plot(val[x], val["val_loss"], "o--", ms=4, color=color, label=f"{name} held-out")
    floor_line(ax, floor, floor_label)
    ax.set(xlabel=LOSS_AXES[x], ylabel="loss (nats / token)", title=title)
    if x != "step":
        ax.ticklabel_format(axis="x", style="sci", scilimits=(0, 0))
    ax.legend(fontsize=8)
    return fig


CURVE_AXES = {"flops": "training FLOPs", "seconds": "training wall-clock (s)"}
COLUMN_NAMES = {"val_bpb": "bits per byte", "val_loss": "loss (nats / token)", "bpb": "bits per byte"}


def final_marks(curves: Mapping[str, Sequence[pd.DataFrame]], column: str = "val_bpb") -> dict[str, float]:
    """Per arm the seed mean of ``column`` at the last evaluation mark all its seeds reached: the end points
    ``loss_vs_flops`` draws, for a title that states them."""
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
    """A takeaway from the end points (``final_marks``): which arm ends lowest and every arm's value, or a tie when
    the lowest arm's seed range at the last mark overlaps another's (the bands ``loss_vs_flops`` draws): a margin
    inside the seed spread crowns no arm."""
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
    """Held-out ``column`` against training FLOPs (or wall-clock): per arm the seed mean as a line and the seed range
    as a band (seeds share their evaluation steps), the floor dotted; several ``x`` give a panel each. With
    ``extra_panel`` (the caller draws into it) the floor is drawn there too, where the caller's points reach it."""
    axes_x = [x] if isinstance(x, str) else list(x)
    for key in axes_x:
        if key not in CURVE_AXES:
            raise ValueError(f"x={key!r} is invalid: must be one of {tuple(CURVE_AXES)}")
    if not curves or any(len(seeds) == 0 for seeds in curves.values()):
        raise ValueError("loss_vs_flops: curves must map each arm to at least one history")
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
                title: str = "") -> Figure:
    """Each pass's training loss against step as points, one panel per run: the density of pass-3 points is the share
    of 3-pass batches, and where pass-2 points start the progressive schedule switched feedback on. ``floor``: the loss
    of a model without context, dotted in every panel; one legend below the panels; ``title``: the takeaway."""
    check_floor(floor)
    runs = named_runs(histories, "pass_losses")
    for frame in runs.values():
        require_columns(frame, ["step", "loss_pass1"], "pass_losses")
    fig, axes = panel_grid(len(runs), panel=(4.0, 3.2), sharey=True)
    columns = sorted({c for f in runs.values() for c in f.columns if c.startswith("loss_pass")},
                     key=lambda c: int(c[len("loss_pass"):]))
    palette = dict(zip(columns, sns.color_palette("deep", n_colors=len(columns))))
    for ax, (name, frame) in zip(axes, runs.items()):
        counts = {}
        for column in columns:
            if column in frame and frame[column].notna().any():
                rows = frame.dropna(subset=[column])
                counts[column[len("loss_pass"):]] = len(rows)
                ax.plot(rows["step"], rows[column], "o", ms=3, alpha=0.7, color=palette[column],
                        label=f"pass {column[len('loss_pass'):]}")
        floor_line(ax, floor, floor_label)
        ax.set(xlabel="optimiser step", ylabel="training loss (nats / token)")
        ax.set_title(f"{name}\nlogged steps: " + ", ".join(f"pass {k} {n}" for k, n in counts.items()), fontsize=9)
    handles, labels = shared_legend(axes)  # below the panels: inside, it sat on the floor line and the points
    fig.legend(handles, labels, fontsize=8, loc="outside lower center", ncols=min(len(labels), 4))
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


class LossFigure:
    """A ``train`` callback that writes ``loss_curves`` to ``path`` at the end and every ``every`` logged rows (0:
    only at the end); the file is replaced atomically, and written too when a run stops early."""

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
        """Called by ``train`` (rank 0) with the whole history when the run stops, however it stops."""
        self.write(history)

    def write(self, history: pd.DataFrame) -> None:
        """Draw ``history`` and swap it in for the file (a reader never sees half a PNG)."""
        buffer = io.BytesIO()
        loss_curves(history, title=self.title).savefig(buffer, format=self.path.suffix.lstrip(".") or "png",
                                                        dpi=self.dpi)
        write_bytes_atomic(self.path, buffer.getvalue())

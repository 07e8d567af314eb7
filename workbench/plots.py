"""Figures the notebooks, the widgets and the CLI share: each draws what an analysis function returned.

Every function takes the DataFrame (or a dict of named DataFrames, to compare runs) that
``workbench.analysis`` or ``workbench.train`` produced and returns a ``matplotlib.figure.Figure``.
Figures are built without ``pyplot``: nothing is registered globally, so nothing needs closing,
no figure is shown twice in a notebook (a returned Figure displays once, as the cell's value), and
``fig.savefig(...)`` works on any backend. Styling is seaborn's ``whitegrid``.

- ``probe_heatmap``: probe accuracy by depth x condition (one panel per task and model);
- ``probe_profile``: accuracy against depth for each condition, with control and majority lines;
- ``layer0_comparison``: the headline bar chart: accuracy at depth 0 per condition;
- ``accuracy_vs_scratch``: accuracy at depth 0 against the distance the label must travel;
- ``specimen_gates``: each probing specimen's answer accuracy against its competence gate;
- ``contraction_curves``: residual and distance to the fixed point against pass (log scale);
- ``sensitivity_decay``: effect of a memory perturbation against distance (log scale);
- ``decoding_state_norms``: the carried state's size along a long SOFT generation;
- ``trace_lengths``: reasoning-trace length distribution and accuracy per decoding regime;
- ``loss_curves``: training (and held-out) loss against step or FLOPs, for one run or several;
- ``loss_vs_flops``: held-out loss against FLOPs (or wall-clock) per arm, seed bands, the floor line;
- ``token_steps``: one position of a ``memory_trajectory``: how the state turns, what it predicts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .decode import REGIMES
from .schedules import VALUES as SCHEDULE_VALUES

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


def _grid(n: int, panel: tuple[float, float], sharey: bool = False) -> tuple[Figure, list[Axes]]:
    """``n`` panels wrapped into rows of at most ``MAX_COLUMNS`` (a row of six is unreadable at cell
    width); the grid's unused cells are removed, so ``fig.axes`` holds exactly the ``n`` panels."""
    ncols = min(n, MAX_COLUMNS)
    fig, axes = new_figure(ncols, -(-n // ncols), panel=panel, sharey=sharey)
    for ax in axes[n:]:
        ax.remove()
    return fig, axes[:n]


def _legend(axes: Sequence[Axes]) -> tuple[list, list[str]]:
    """Every labelled artist of ``axes`` once (first drawn wins): one legend for panels that share entries."""
    entries: dict = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    return list(entries.values()), list(entries)


def _require(df: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what} needs columns {list(columns)}; missing {missing} (has {list(df.columns)})")
    if df.empty:
        raise ValueError(f"{what} got an empty DataFrame")


def _runs(results: Runs, what: str) -> dict[str, pd.DataFrame]:
    """One DataFrame or a dict of them as {name: frame}; a lone frame is named ''."""
    runs = {"": results} if isinstance(results, pd.DataFrame) else dict(results)
    if not runs:
        raise ValueError(f"{what} got no runs")
    return runs


def _positive(values: pd.Series) -> np.ndarray:
    """Values for a log axis: zeros (an exact fixed point, an unused memory) become gaps, not -inf."""
    arr = values.to_numpy(dtype=float)
    return np.where(arr > 0, arr, np.nan)


ZERO_LABEL = "▼ on the axis: exactly 0"


def _log_line(ax: Axes, x, y: pd.Series, *args, **kwargs) -> bool:
    """Plot ``y`` on a log axis: positive values as a line, exact zeros as ▼ on the bottom edge.

    A log axis has no 0, so an exact zero (an exact fixed point, an unused memory) would otherwise
    make its line vanish without a trace. Returns whether any zero was marked (its marker carries
    ``ZERO_LABEL`` once per axes, for the legend).
    """
    (line,) = ax.plot(x, _positive(y), *args, **kwargs)
    zeros = y.to_numpy(dtype=float) == 0
    if zeros.any():
        marked = ZERO_LABEL in ax.get_legend_handles_labels()[1]
        ax.scatter(np.asarray(x, dtype=float)[zeros], np.zeros(int(zeros.sum())), marker="v", s=22,
                   color=line.get_color(), clip_on=False, zorder=4, transform=ax.get_xaxis_transform(),
                   label=None if marked else ZERO_LABEL)
    return bool(zeros.any())


LOG_TICKS = (1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)


def _log_steps(ax: Axes, last: float, first: float = 1) -> None:
    """A log x axis over counts (passes, distances) from ``first`` to ``last``, ticks written as integers:
    what happens at 2-3 (the depths models are trained at) stays as wide as what happens at 50-100."""
    from matplotlib.ticker import FixedLocator, NullLocator, StrMethodFormatter

    ax.set_xscale("log")
    ax.set_xlim(first / 1.1, last * 1.1)
    ax.xaxis.set_major_locator(FixedLocator([t for t in LOG_TICKS if first <= t <= last]))
    ax.xaxis.set_major_formatter(StrMethodFormatter("{x:.0f}"))
    ax.xaxis.set_minor_locator(NullLocator())


def _run_styles(names: Sequence[str]) -> dict[str, dict]:
    """A colour per arm and a line style per seed: runs named ``<arm>_s<seed>`` share their arm's colour,
    so seven runs of four arms read as four colours, not seven."""
    import re

    arms = [re.sub(r"_s\d+$", "", name) for name in names]
    colors = dict(zip(_in_order(pd.Series(arms)), sns.color_palette("deep", n_colors=len(set(arms)))))
    styles, seen = {}, {}
    for name, arm in zip(names, arms):
        k = seen[arm] = seen.get(arm, -1) + 1
        styles[name] = {"color": colors[arm], "ls": ("-", "--", ":", "-.")[k % 4]}
    return styles


def _facets(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """Split probe results into panels by task and model (whichever of the two columns exist)."""
    keys = [c for c in ("task", "model") if c in df.columns and df[c].nunique() > 1]
    if not keys:
        return [(" / ".join(str(df[c].iloc[0]) for c in ("task", "model") if c in df.columns), df)]
    return [(" / ".join(map(str, key if isinstance(key, tuple) else (key,))), group)
            for key, group in df.groupby(keys, sort=False)]


def _empty(ax: Axes, text: str) -> None:
    """A panel with nothing to draw says why in its middle (rather than standing blank)."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=9, wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def _in_order(values: pd.Series) -> list:
    """Unique values in order of first appearance: the caller's order of conditions is meaningful."""
    return list(dict.fromkeys(values))


# ---------------------------------------------------------------------------------------------- probes
def probe_heatmap(df: pd.DataFrame, value: str = "accuracy") -> Figure:
    """Probe ``value`` by depth (rows, 0 = input at the bottom) x condition (columns), one panel per task/model.

    Where recurrence puts global state within reach of shallow layers shows as the bottom rows
    lighting up under the recurrent conditions only. One colour scale (0..1) for every panel.
    """
    _require(df, ["condition", "layer", value], "probe_heatmap")
    facets = _facets(df)
    fig, axes = new_figure(len(facets), panel=(1.2 + 1.1 * df["condition"].nunique(), 3.8))
    for ax, (title, group) in zip(axes, facets):
        table = group.pivot_table(index="layer", columns="condition", values=value, aggfunc="mean", sort=False)
        table = table.sort_index(ascending=False)[_in_order(group["condition"])]
        sns.heatmap(table, ax=ax, vmin=0.0, vmax=1.0, cmap="viridis", annot=True, fmt=".2f", cbar=False,
                    annot_kws={"fontsize": 8})
        ax.set(title=title, xlabel="condition", ylabel="depth (0 = input)")
        ax.tick_params(axis="x", labelrotation=30)
    fig.colorbar(axes[0].collections[0], ax=axes, label=value, shrink=0.9)
    return fig


def probe_profile(df: pd.DataFrame, highlight_depth: int | None = None) -> Figure:
    """Accuracy against depth for each condition (and model, task), with its control task and the majority rate.

    The band is +- ``accuracy_std`` across folds; the dashed line of the same colour is the control
    task (a probe that memorises rather than reads state scores well there too: selectivity is the
    gap); the grey dotted line is the majority-class rate. ``highlight_depth`` marks one depth.
    """
    _require(df, ["condition", "layer", "accuracy"], "probe_profile")
    fig, (ax,) = new_figure(1, panel=(6.0, 4.0))
    group_keys = ["condition"] + [c for c in ("model", "task") if c in df.columns and df[c].nunique() > 1]
    groups = df.groupby(group_keys, sort=False)
    for color, (key, group) in zip(sns.color_palette("deep", n_colors=groups.ngroups), groups):
        group = group.sort_values("layer")
        label = " / ".join(map(str, key if isinstance(key, tuple) else (key,)))
        ax.plot(group["layer"], group["accuracy"], "o-", color=color, label=label)
        if "accuracy_std" in group:
            ax.fill_between(group["layer"], group["accuracy"] - group["accuracy_std"],
                            group["accuracy"] + group["accuracy_std"], color=color, alpha=0.2, lw=0)
        if "control_accuracy" in group:
            ax.plot(group["layer"], group["control_accuracy"], "--", color=color, lw=1)
    if "majority" in df:
        ax.axhline(float(df["majority"].mean()), color="grey", ls=":", lw=1.5, label="majority")
    if highlight_depth is not None:
        ax.axvline(highlight_depth, color="black", lw=1, alpha=0.5)
    ax.set(xlabel="depth (0 = input)", ylabel="probe accuracy", ylim=(0.0, 1.02),
           xticks=sorted(df["layer"].unique()))
    ax.legend(fontsize=8)
    return fig


BOUNDED = ("suffix1",)  # the conditions the fed-back upper bound bounds at depth 0: one recurrent step


def layer0_comparison(df: pd.DataFrame, depth: int = 0) -> Figure:
    """Probe accuracy at one depth (default 0, the input) per condition: the probing headline.

    Bars are grouped by condition, coloured by model; error bars are ``accuracy_std``; a black tick
    on each bar is its control-task accuracy; the dashed line is the majority-class rate. Where the
    columns exist, an open circle marks the untrained twin's accuracy (``twin_accuracy``) and a star
    the upper bound (``upper_bound``: the top-layer probe at the fed-back position, all one recurrent
    step can hand to layer 0), drawn only where it bounds the bar: at depth 0 under ``suffix1``
    (one recurrent step; ``BOUNDED``). One panel per task, one row of panels per ``scratch_updates``;
    a task without specimens at a length says so in its panel; the legend sits under the panels.
    Standard prefill near the dashed line and recurrent conditions far above it — above the twin —
    is the FBT paper's finding: feedback exposes learned state to the very first layer.
    """
    _require(df, ["condition", "layer", "accuracy"], "layer0_comparison")
    at = df[df["layer"] == depth]
    if at.empty:
        raise ValueError(f"depth={depth!r} is invalid: the probes cover depths {sorted(df['layer'].unique())}")
    tasks = _in_order(at["task"]) if "task" in at else [None]
    lengths = sorted(at["scratch_updates"].unique()) if "scratch_updates" in at else [None]
    fig, axes = new_figure(len(tasks), len(lengths), panel=(1.2 + 0.75 * at["condition"].nunique(), 3.2))
    models = _in_order(at["model"]) if "model" in at else [None]
    palette = sns.color_palette("deep", n_colors=len(models))
    width = 0.8 / len(models)
    marks = {"twin_accuracy": ({"marker": "o", "facecolors": "none", "edgecolors": "black"}, "untrained twin"),
             "upper_bound": ({"marker": "*", "color": "black"}, "upper bound (fed-back top layer)")}
    panels = [(task, length) for length in lengths for task in tasks]
    for ax, (task, length) in zip(axes, panels):
        sub = at if task is None else at[at["task"] == task]
        sub = sub if length is None else sub[sub["scratch_updates"] == length]
        title = " / ".join(t for t in ("" if task is None else str(task),
                                        "" if length is None else f"{length} scratch lines") if t)
        if sub.empty:
            ax.set_title(title)
            _empty(ax, f"no specimen of {task}\nwith {length} scratch lines")
            continue
        conditions = _in_order(sub["condition"])
        for m, (model, color) in enumerate(zip(models, palette)):
            rows = sub if model is None else sub[sub["model"] == model]
            if rows.empty:
                continue
            rows = rows.groupby("condition", sort=False).mean(numeric_only=True).reindex(conditions)
            x = np.arange(len(conditions)) - 0.4 + width * (m + 0.5)
            err = rows["accuracy_std"] if "accuracy_std" in rows else None
            ax.bar(x, rows["accuracy"], width=width * 0.9, yerr=err, color=color, capsize=3,
                   label=None if model is None else str(model))
            if "control_accuracy" in rows:
                ax.scatter(x, rows["control_accuracy"], marker="_", s=400 * width, color="black", zorder=3,
                           label="control task")
            for column, (style, label) in marks.items():
                if column not in rows:
                    continue
                values = rows[column]
                if column == "upper_bound":  # a ceiling only for a depth-0 probe after one recurrent step
                    values = values.where(rows.index.isin(BOUNDED) & (depth == 0))
                if values.notna().any():
                    ax.scatter(x, values, s=30, zorder=4, label=label, **style)
        if "majority" in sub and not sub.empty:
            ax.axhline(float(sub["majority"].mean()), color="grey", ls="--", lw=1.5, label="majority")
        ax.set_xticks(np.arange(len(conditions)), [str(c) for c in conditions], rotation=30, ha="right",
                      rotation_mode="anchor")
        ax.set(ylim=(0.0, 1.05), ylabel=f"probe accuracy at depth {depth}", title=title)
    handles, labels = _legend(axes)  # every model and mark once, whichever panel drew it
    fig.legend(handles, labels, fontsize=8, loc="outside lower center", ncols=min(len(labels), 4))
    return fig


def accuracy_vs_scratch(df: pd.DataFrame, condition: str = "suffix1", depth: int = 0) -> Figure:
    """Probe accuracy at one depth and condition against the number of scratch lines, per task.

    One line per model (colour); dashed, the same model's untrained twin (``twin_accuracy``);
    dotted, its upper bound (``upper_bound``); grey, the majority rate. Distance between the detail
    and the label is what a recurrent step must bridge: a lift that holds as it grows is carried by
    the fed-back state, one that fades was read from nearby tokens.
    """
    _require(df, ["task", "model", "scratch_updates", "condition", "layer", "accuracy"], "accuracy_vs_scratch")
    at = df[(df["layer"] == depth) & (df["condition"] == condition)]
    if at.empty:
        raise ValueError(f"condition={condition!r}, depth={depth!r} is invalid: no rows for them")
    tasks = _in_order(at["task"])
    fig, axes = new_figure(len(tasks), panel=(4.2, 3.6))
    models = _in_order(at["model"])
    for ax, task in zip(axes, tasks):
        sub = at[at["task"] == task]
        for model, color in zip(models, sns.color_palette("deep", n_colors=len(models))):
            rows = sub[sub["model"] == model].sort_values("scratch_updates")
            if rows.empty:
                continue
            ax.plot(rows["scratch_updates"], rows["accuracy"], "o-", color=color, label=str(model))
            if "twin_accuracy" in rows:
                ax.plot(rows["scratch_updates"], rows["twin_accuracy"], "s--", color=color, alpha=0.7,
                        label=f"{model}: twin")
            if "upper_bound" in rows:
                ax.plot(rows["scratch_updates"], rows["upper_bound"], ":", color=color, label=f"{model}: upper bound")
        if "majority" in sub:
            ax.axhline(float(sub["majority"].mean()), color="grey", ls="--", lw=1, label="majority")
        ax.set(title=str(task), xlabel="scratch lines", ylabel=f"accuracy at depth {depth}, {condition}",
               ylim=(0.0, 1.05), xticks=sorted(sub["scratch_updates"].unique()))
    axes[0].legend(fontsize=7, loc="lower left")
    return fig


def specimen_gates(df: pd.DataFrame, threshold: float) -> Figure:
    """Each specimen's competence before it is probed: answer accuracy per scratch length and arm.

    Bars: accuracy under the condition the gate reads (``gate_value``); black dots: under the exact
    recurrence (``answer_sequential``, where measured); dashed: the gate's ``threshold``. One panel
    per task. A bar below the line is a specimen that is reported, never probed.
    """
    _require(df, ["task", "arm", "scratch_updates", "gate_value"], "specimen_gates")
    tasks = _in_order(df["task"])
    fig, axes = new_figure(len(tasks), panel=(4.0, 3.4))
    arms = _in_order(df["arm"])
    width = 0.8 / len(arms)
    for ax, task in zip(axes, tasks):
        sub = df[df["task"] == task]
        lengths = sorted(sub["scratch_updates"].unique())
        for a, (arm, color) in enumerate(zip(arms, sns.color_palette("deep", n_colors=len(arms)))):
            rows = sub[sub["arm"] == arm].set_index("scratch_updates").reindex(lengths)
            x = np.arange(len(lengths)) - 0.4 + width * (a + 0.5)
            ax.bar(x, rows["gate_value"], width=width * 0.9, color=color, label=str(arm))
            if "answer_sequential" in rows:
                ax.scatter(x, rows["answer_sequential"], color="black", zorder=3, s=15,
                           label="exact recurrence" if a == len(arms) - 1 else None)
        ax.axhline(threshold, color="grey", ls="--", lw=1.5, label=f"gate {threshold:g}")
        ax.set_xticks(np.arange(len(lengths)), [str(n) for n in lengths])
        ax.set(title=str(task), xlabel="scratch lines", ylabel="held-out answer accuracy", ylim=(0.0, 1.05))
    axes[0].legend(fontsize=7, loc="lower left")
    return fig


# ---------------------------------------------------------------------------------------------- contraction
def contraction_curves(results: Runs, max_pass: int | None = None, depths: Mapping[str, int] | None = None,
                       note: str = "") -> Figure:
    """Residual ``delta`` and ``fixed_point_distance`` against pass (log y), one line per run.

    Takes ``pass_dynamics`` output, or a dict of them by name (mechanism, training mix, ...). A
    third panel shows the loss when any run has one. Exact zeros (the fixed point reached in
    floating point) end a line and are marked ▼ on the axis rather than plunging to -inf; runs
    named ``<arm>_s<seed>`` share a colour (one line style per seed). Past 10 passes the pass axis
    is logarithmic, so passes 2-3 (where models are trained) are as wide as 50-100. ``max_pass``
    cuts every run there.
    ``depths``: label -> pass, drawn as dotted verticals (the depths the models were trained at,
    so a reader sees which passes are extrapolation); ``note``: a title saying what was measured
    (sequence length T, the positions the numbers are over), since the curves mean little without.
    """
    runs = _runs(results, "contraction_curves")
    for frame in runs.values():
        _require(frame, ["pass", "delta", "fixed_point_distance"], "contraction_curves")
    has_loss = any("loss" in f and f["loss"].notna().any() for f in runs.values())
    panels = [("delta", "residual ||H^k - H^(k-1)|| / ||H^k||"),
              ("fixed_point_distance", "distance to fixed point ||H^k - H*|| / ||H*||")]
    fig, axes = new_figure(3 if has_loss else 2, panel=(4.4, 3.6))
    styles = _run_styles(list(runs))
    last = 1
    for name, frame in runs.items():
        if max_pass is not None:
            frame = frame[frame["pass"] <= max_pass]
        last = max(last, int(frame["pass"].max()) if len(frame) else 1)
        for ax, (column, _) in zip(axes, panels):
            _log_line(ax, frame["pass"], frame[column], label=name or None, **styles[name])
        if has_loss and "loss" in frame:
            axes[2].plot(frame["pass"], frame["loss"], label=name or None, **styles[name])
    for ax, (_, ylabel) in zip(axes, panels):
        ax.set(xlabel="pass", ylabel=ylabel, yscale="log")
    if has_loss:
        axes[2].set(xlabel="pass", ylabel="loss (nats / token)")
    for (label, depth), style in zip((depths or {}).items(), (":", "--", "-.")):
        for ax in axes:
            ax.axvline(depth, color="grey", ls=style, lw=1.2, label=label if ax is axes[0] else None)
    if last > 10:
        for ax in axes:
            _log_steps(ax, last)
    handles, labels = _legend(axes[:2])
    if len(runs) > 1 or next(iter(runs)) or depths or ZERO_LABEL in labels:
        fig.legend(handles, labels, fontsize=8, loc="outside right upper")
    if note:
        fig.suptitle(note, fontsize=10)
    return fig


def decoding_state_norms(results: Runs, note: str = "") -> Figure:
    """The carried state's size (before its RMSNorm) along a long SOFT generation, one line per run.

    Takes ``analysis.contraction.decoding_states`` output or a dict of them: the mean over the batch
    per position, a band up to its max, and a dotted line where the model starts writing. A line that
    stays level after it says the recurrence keeps its state bounded on its own output (the position
    axis stays linear: what it shows is the long stretch after that line). Runs ``<arm>_s<seed>``
    share a colour, the legend sits beside the panel. ``note``: a
    title (the context length and depth the models were trained at, which the generation runs past).
    """
    runs = _runs(results, "decoding_state_norms")
    fig, (ax,) = new_figure(1, panel=(9.0, 4.0))
    styles = _run_styles(list(runs))
    for name, frame in runs.items():
        _require(frame, ["position", "generated", "state_norm_mean", "state_norm_max"], "decoding_state_norms")
        ax.plot(frame["position"], frame["state_norm_mean"], lw=1, label=name or None, **styles[name])
        ax.fill_between(frame["position"], frame["state_norm_mean"], frame["state_norm_max"],
                        color=styles[name]["color"], alpha=0.15)
    starts = {int(f.loc[f["generated"], "position"].min()) for f in runs.values() if f["generated"].any()}
    for start in sorted(starts):
        ax.axvline(start, color="grey", ls=":", lw=1.5, label=f"writes from position {start}")
    ax.set(xlabel="position (prompt, then generated)", ylabel="||h_t|| before the norm", yscale="log")
    fig.legend(*_legend([ax]), fontsize=8, loc="outside right upper")
    if note:
        ax.set_title(note, fontsize=10)
    return fig


def sensitivity_decay(results: Runs, note: str = "") -> Figure:
    """Effect of a perturbation of the carried memory against distance (log y), one line per run.

    Takes ``sensitivity`` output or a dict of them. The dotted line at 1 is the size of the
    injected perturbation: below it the recurrence forgets, above it it amplifies. A run whose
    effect is exactly zero (no mechanism: the memory is never read) has no line, and says so (its
    zeros are marked ▼ on the axis). Past 10 tokens the distance axis is logarithmic; runs
    ``<arm>_s<seed>`` share a colour.
    ``note``: a title (sequence length, training depth, where the nudge was made).
    """
    runs = _runs(results, "sensitivity_decay")
    fig, (ax,) = new_figure(1, panel=(8.0, 4.0))
    styles = _run_styles(list(runs))
    for name, frame in runs.items():
        _require(frame, ["distance", "effect"], "sensitivity_decay")
        unused = bool((frame["effect"] == 0).all())
        label = (name or "effect") + (" (exactly 0: memory unused)" if unused else "")
        _log_line(ax, frame["distance"], frame["effect"], marker="o", ms=3, label=label, **styles[name])
    ax.axhline(1.0, color="grey", ls=":", lw=1.5, label="injected perturbation")
    ax.set(xlabel="distance d (tokens after the perturbed position)", ylabel="effect ||Δm_{t0+d}|| / eps",
           yscale="log")
    last = max(float(f["distance"].max()) for f in runs.values())
    if last > 10:
        _log_steps(ax, last)
    fig.legend(*_legend([ax]), fontsize=8, loc="outside right upper")
    if note:
        ax.set_title(note, fontsize=10)
    return fig


# ---------------------------------------------------------------------------------------------- traces
def trace_lengths(df: pd.DataFrame, lines: pd.DataFrame | None = None) -> Figure:
    """Reasoning-trace length per decoding regime (box and points; median written above) and accuracy.

    The FBT paper's claim to check: under latent feedback (soft, fused) base models write shorter
    traces at equal or better accuracy. Points are coloured by correctness, so a regime that is
    short only because it gives up shows as a cloud of wrong answers. Rows of the training mix
    (``analysis.traces.training_traces``) draw as one more box and have no accuracy bar (they are
    correct by construction). ``lines`` (``analysis.line_distribution``) adds a panel: the share of
    traces by intermediate lines written, correct solid and wrong light, per regime beside the
    training mix, so a regime that is shorter than the mix it learned from shows at a glance.
    """
    from .analysis.traces import TRAINING

    _require(df, ["regime", "length", "correct"], "trace_lengths")
    order = [r for r in REGIMES if r in set(df["regime"])] + [r for r in _in_order(df["regime"]) if r not in REGIMES]
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
    ax_len.set_xticks(range(len(order)), order)
    ax_len.set(xlabel="regime", ylabel="trace length (tokens before the answer)", ylim=(0, top * 1.12 + 1))
    ax_len.legend(title="correct", fontsize=8)
    decoded = [r for r in order if r != TRAINING]
    accuracy = df.groupby("regime")["correct"].agg(["mean", "size"]).reindex(decoded)
    ax_acc.bar(decoded, accuracy["mean"], color=[palette[r] for r in decoded])
    for i, (acc, n) in enumerate(zip(accuracy["mean"], accuracy["size"])):
        ax_acc.text(i, acc + 0.02, f"{acc:.0%} of {n}", ha="center", fontsize=8)
    ax_acc.set(xlabel="regime", ylabel="accuracy", ylim=(0.0, 1.1))
    if lines is not None:
        _trace_lines(axes[2], lines, palette)
    return fig


def _trace_lines(ax: Axes, lines: pd.DataFrame, palette: Mapping[str, object]) -> None:
    """Share of traces by lines written per regime, stacked correct (solid) over wrong (light)."""
    _require(lines, ["regime", "outcome", "lines", "count"], "trace_lengths(lines=...)")
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


# ---------------------------------------------------------------------------------------------- training
LOSS_AXES = {"step": "optimiser step", "flops": "training FLOPs", "tokens": "training tokens"}


def loss_curves(history: Runs, x: str = "step", title: str = "") -> Figure:
    """Training loss against ``x`` ("step", "flops" or "tokens"), with held-out loss where recorded.

    One run (``train``'s ``history``): the objective, each pass's loss when there are several, and
    ``val_loss`` as points. Several runs (a dict by name): one colour per run, training loss solid
    and held-out dashed — with ``x="flops"`` that is the comparison at matched compute that a
    multi-pass or interleaved schedule (2x, Kx the work per step) has to win.
    """
    if x not in LOSS_AXES:
        raise ValueError(f"x={x!r} is invalid: must be one of {tuple(LOSS_AXES)}")
    runs = _runs(history, "loss_curves")
    for frame in runs.values():
        _require(frame, [x, "loss"], "loss_curves")
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
    ax.set(xlabel=LOSS_AXES[x], ylabel="loss (nats / token)", title=title)
    if x != "step":
        ax.ticklabel_format(axis="x", style="sci", scilimits=(0, 0))
    ax.legend(fontsize=8)
    return fig


CURVE_AXES = {"flops": "training FLOPs", "seconds": "training wall-clock (s)"}


def loss_vs_flops(curves: Mapping[str, Sequence[pd.DataFrame]], floor: float | None = None,
                  floor_label: str = "unigram", column: str = "val_bpb", x: str | Sequence[str] = "flops",
                  title: str = "", extra_panel: bool = False) -> Figure:
    """Held-out ``column`` against training FLOPs (or wall-clock): one colour per arm, its seed mean as a line
    and the range over seeds as a band, with the floor (unigram / chance) as a dotted line.

    ``curves`` maps an arm to one history per seed (the rows with an evaluation). Seeds of one arm share
    their evaluation steps, so the band is taken mark by mark; on the wall-clock axis each mark sits at
    its seeds' mean time. ``x`` may name several axes ("flops", "seconds"): one panel each, so compute
    and time can be read side by side. ``extra_panel`` adds an empty panel for the caller.
    """
    axes_x = [x] if isinstance(x, str) else list(x)
    for key in axes_x:
        if key not in CURVE_AXES:
            raise ValueError(f"x={key!r} is invalid: must be one of {tuple(CURVE_AXES)}")
    if not curves or any(len(seeds) == 0 for seeds in curves.values()):
        raise ValueError("loss_vs_flops: curves must map each arm to at least one history")
    fig, axes = new_figure(len(axes_x) + int(extra_panel), panel=(5.6, 4.0))
    for (arm, seeds), color in zip(curves.items(), sns.color_palette("deep", n_colors=len(curves))):
        for frame in seeds:
            _require(frame, [*axes_x, column], "loss_vs_flops")
        n = min(len(frame) for frame in seeds)
        values = np.stack([frame[column].to_numpy()[:n] for frame in seeds])
        for key, ax in zip(axes_x, axes):
            at = np.mean([frame[key].to_numpy()[:n] for frame in seeds], axis=0)
            ax.plot(at, values.mean(0), "o-", ms=3, color=color, label=f"{arm} ({len(seeds)} seeds)")
            if len(seeds) > 1:
                ax.fill_between(at, values.min(0), values.max(0), color=color, alpha=0.25, lw=0)
    for key, ax in zip(axes_x, axes):
        if floor is not None:
            ax.axhline(floor, color="grey", ls=":", lw=1.5, label=f"{floor_label} {floor:.3f}")
        ax.set(xlabel=CURVE_AXES[key], ylabel=f"held-out {column}", title=title if key == axes_x[0] else "")
        if key == "flops":
            ax.ticklabel_format(axis="x", style="sci", scilimits=(0, 0))
        ax.legend(fontsize=8)
    return fig


# ---------------------------------------------------------------------------------------------- token stepper
def token_steps(trajectory: pd.DataFrame, position: int, example: int = 0,
                decode: Callable[[int], str] | None = None) -> Figure:
    """One position of a ``memory_trajectory``: how far each step turns the memory, and what ``position`` predicts.

    Left: cosine of consecutive memories ``cos(m_{t-1}, m_t)`` along the sequence, the selected
    position marked (near 1: the token barely changes the carried state). Right: the position's
    top next-token probabilities, labelled with ``decode(token_id)`` when given.
    """
    _require(trajectory, ["example", "position", "token", "cosine_prev", "top_tokens", "top_probs"], "token_steps")
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


# ---------------------------------------------------------------------------------------------- experiments
def comparison_bars(table: pd.DataFrame, title: str = "") -> Figure:
    """One bar per arm of an experiment (mean over seeds, error bar = seed std), a panel per task/metric.

    Takes the table ``workbench.experiments`` writes (``arm``, ``metric``, ``value``, ``seed_std``,
    optionally ``task``); a row's paired interval against the reference arm is in its CSV.
    """
    _require(table, ["arm", "metric", "value"], "comparison_bars")
    keys = [c for c in ("task", "metric") if c in table.columns]
    panels = [(" / ".join(map(str, k if isinstance(k, tuple) else (k,))), g)
              for k, g in table.groupby(keys, sort=False)]
    fig, axes = new_figure(len(panels), panel=(1.2 + 0.9 * table["arm"].nunique(), 3.6))
    for ax, (name, group) in zip(axes, panels):
        colors = sns.color_palette("deep", n_colors=len(group))
        err = group["seed_std"] if "seed_std" in group else None
        ax.bar(np.arange(len(group)), group["value"], yerr=err, color=colors, capsize=3)
        ax.set_xticks(np.arange(len(group)), [str(a) for a in group["arm"]], rotation=20)
        ax.set(title=name, ylabel=str(group["metric"].iloc[0]))
    if title:
        fig.suptitle(title)
    return fig


# ---- notebooks 04-06
def jacobi_settling(frame: pd.DataFrame, exact_below: float = 1e-9) -> Figure:
    """``analysis.fusion.jacobi_errors`` as a pass x position map: the staircase of exact positions.

    Colour is ``log10`` of each position's distance to the sequential memory; cells below
    ``exact_below`` (exact up to rounding) are drawn white and outlined, so the diagonal edge —
    pass k is exact at positions t < k — shows whatever the model.
    """
    _require(frame, ["pass", "position", "error"], "jacobi_settling")
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


def pass_losses(histories: Runs) -> Figure:
    """Each pass's training loss (``loss_pass1``, ``loss_pass2``, ...) against step, one panel per run.

    Steps that ran fewer passes have no value for the later ones, so each pass is drawn as points:
    the density of the pass-3 points is the share of 3-pass batches, and where the pass-2 points
    start is where the progressive schedule switched latent feedback on. Panels wrap into rows of
    ``MAX_COLUMNS`` and share their loss axis, so runs compare at a glance.
    """
    runs = _runs(histories, "pass_losses")
    for frame in runs.values():
        _require(frame, ["step", "loss_pass1"], "pass_losses")
    fig, axes = _grid(len(runs), panel=(4.0, 3.2), sharey=True)
    columns = sorted({c for f in runs.values() for c in f.columns if c.startswith("loss_pass")},
                     key=lambda c: int(c[len("loss_pass"):]))
    palette = dict(zip(columns, sns.color_palette("deep", n_colors=len(columns))))
    for ax, (name, frame) in zip(axes, runs.items()):
        for column in columns:
            if column in frame and frame[column].notna().any():
                rows = frame.dropna(subset=[column])
                ax.plot(rows["step"], rows[column], "o", ms=3, alpha=0.7, color=palette[column],
                        label=f"pass {column[len('loss_pass'):]} ({len(rows)} logged steps)")
        ax.set(xlabel="optimiser step", ylabel="training loss (nats / token)", title=name)
        ax.legend(fontsize=8)
    return fig


def regime_losses(frame: pd.DataFrame) -> Figure:
    """Next-token loss of a continuation per position, one line per decoding regime (``regime_losses``).

    The legend gives each regime's mean over the scored positions, so a regime that helps only a
    few positions is told from one that helps throughout.
    """
    _require(frame, ["regime", "position", "loss"], "regime_losses")
    fig, (ax,) = new_figure(1, panel=(7.0, 3.6))
    regimes = _in_order(frame["regime"])
    order = [r for r in REGIMES if r in regimes] + [r for r in regimes if r not in REGIMES]
    palette = dict(zip(REGIMES, sns.color_palette("deep", n_colors=len(REGIMES))))
    for regime in order:
        rows = frame[frame["regime"] == regime].sort_values("position")
        ax.plot(rows["position"], rows["loss"], "o-", ms=3, color=palette.get(regime),
                label=f"{regime} (mean {rows['loss'].mean():.3f})")
    ax.set(xlabel="position (predicting the next token)", ylabel="loss (nats)")
    ax.legend(fontsize=8)
    return fig


# ---- notebooks 07-09
def trace_example(df: pd.DataFrame, example: int, regime: str | None = None) -> Figure:
    """One example's trace length under every decoding regime, beside each regime's median.

    Takes ``trace_lengths`` output (one run). A bar per regime, green when that trace's answer is
    right and red when not (hatched when no answer line was written); the black tick is the
    regime's median over all examples, so one question is read against the typical trace.
    ``regime`` outlines the chosen bar.
    """
    from matplotlib.patches import Patch

    _require(df, ["regime", "example", "length", "correct"], "trace_example")
    if "run" in df and df["run"].nunique() > 1:
        raise ValueError(f"df holds the traces of runs {_in_order(df['run'])}: select one run first")
    rows = df[df["example"] == example]
    if rows.empty:
        raise ValueError(f"example={example!r} is invalid: the traces hold examples "
                         f"{int(df['example'].min())}..{int(df['example'].max())}")
    order = [r for r in REGIMES if r in set(df["regime"])] + [r for r in _in_order(df["regime"]) if r not in REGIMES]
    if regime is not None and regime not in order:
        raise ValueError(f"regime={regime!r} is invalid: the traces hold {order}")
    rows = rows.set_index("regime").reindex(order)
    medians = df.groupby("regime")["length"].median().reindex(order)
    fig, (ax,) = new_figure(1, panel=(5.5, 3.4))
    x = np.arange(len(order))
    colors = ["tab:green" if ok else "tab:red" for ok in rows["correct"].fillna(False)]
    bars = ax.bar(x, rows["length"], color=colors, alpha=0.8, width=0.6)
    answered = rows["answered"] if "answered" in rows else pd.Series(True, index=rows.index)
    for bar, name, done in zip(bars, order, answered):
        bar.set_hatch("" if done else "//")
        if name == regime:
            bar.set(edgecolor="black", linewidth=2.5)
    median = ax.scatter(x, medians, marker="_", s=900, color="black", zorder=3)
    ax.set_xticks(x, order)
    top = float(max(df["length"].max(), 1))
    ax.set(xlabel="regime", ylabel="trace length (tokens before the answer)", ylim=(0, top * 1.35),
           title=f"example {example}")
    keys = [Patch(color="tab:green", alpha=0.8), Patch(color="tab:red", alpha=0.8),
            Patch(facecolor="white", edgecolor="grey", hatch="//"), median]
    ax.legend(keys, ["right answer", "wrong answer", "no answer line", "median over examples"], fontsize=8,
              loc="upper center", ncols=2)
    return fig


def fixed_point_readability(table: pd.DataFrame, title: str = "", readable: float = 0.95) -> Figure:
    """Per arm (``fixed_point_study``'s run table): answer accuracy at passes 1-3 and under the exact recurrence,
    a dot per seed, the families apart; beside it each run's top Lyapunov exponent of the exact recurrence."""
    _require(table, ["arm", "family", "accuracy_pass1", "accuracy_pass2", "accuracy_pass3", "accuracy_exact",
                     "lyapunov_top"], "fixed_point_readability")
    arms = list(dict.fromkeys(table["arm"]))
    families = [table.loc[table["arm"] == a, "family"].iloc[0] for a in arms]
    with sns.axes_style(STYLE):
        fig = Figure(figsize=(13, 4.6), layout="constrained")
        ax, lx = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 1.3]})
    columns = {"accuracy_pass1": ("pass 1 (STANDARD)", "#bbbbbb"), "accuracy_pass2": ("pass 2", "#7fa7d6"),
               "accuracy_pass3": ("pass 3", "#3d6fb0"), "accuracy_exact": ("exact recurrence", "#d1495b")}
    width = 0.8 / len(columns)
    for j, (column, (label, colour)) in enumerate(columns.items()):
        for i, arm in enumerate(arms):
            values = table.loc[table["arm"] == arm, column].to_numpy()
            x = i - 0.4 + width * (j + 0.5)
            ax.bar(x, values.mean(), width, color=colour, label=label if i == 0 else None)
            ax.scatter(np.full(len(values), x), values, color="black", s=8, zorder=3)
    ax.axhline(readable, color="#d1495b", ls="--", lw=1)
    ax.axhline(0.5, color="grey", ls=":", lw=1)
    ax.text(len(arms) - 0.5, readable, f"readable {readable:g}", ha="right", va="bottom", fontsize=8, color="#d1495b")
    ax.text(len(arms) - 0.5, 0.5, "chance 0.5", ha="right", va="bottom", fontsize=8, color="grey")
    for i in range(1, len(arms)):
        if families[i] != families[i - 1]:
            ax.axvline(i - 0.5, color="black", lw=0.6)
    ax.set_xticks(range(len(arms)), [a.removeprefix("ft_").replace("_", " ") for a in arms], fontsize=8,
                  rotation=20, ha="right")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("answer accuracy (held-out prompts)")
    ax.set_title("  |  ".join(dict.fromkeys(families)) + " (families, left to right)", fontsize=9)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=4, fontsize=8, frameon=False)
    for i, arm in enumerate(arms):
        values = table.loc[table["arm"] == arm, "lyapunov_top"].to_numpy()
        lx.scatter(values, np.full(len(values), i), color="#3d6fb0", s=14)
    lx.axvline(0, color="grey", lw=0.8)
    lx.set_yticks(range(len(arms)), arms, fontsize=8)
    lx.invert_yaxis()
    lx.set_xlabel("top Lyapunov exponent of the exact recurrence\n(per position; < 0: perturbations die out)")
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def experiment_figure(tables: Mapping[str, pd.DataFrame], title: str = "") -> Figure:
    """A recipe's figure from the tables it wrote (``analysis.results.recipe_tables``), by their content.

    ``pass_dynamics`` (one table, a ``run`` column): ``contraction_curves`` per run; ``traces``:
    ``trace_lengths``; a probe table (``condition``, ``layer``): ``layer0_comparison``; a causal-use
    table (``swap_flip``, with ``distances``): ``causal_use_figure``; an arms table (``arm``,
    ``metric``, ``value``): ``comparison_bars``.
    """
    if "pass_dynamics" in tables:
        return contraction_curves(dict(tuple(tables["pass_dynamics"].groupby("run", sort=False))))
    if "traces" in tables:
        return trace_lengths(tables["traces"])
    if "results" not in tables:
        raise ValueError(f"tables holds {sorted(tables)}: expected 'results' (and maybe 'pass_dynamics' or 'traces')")
    results = tables["results"]
    if {"condition", "layer"} <= set(results.columns):
        return layer0_comparison(results)
    if {"accuracy_exact", "lyapunov_top", "family"} <= set(results.columns):  # fixed_point_study's runs
        return fixed_point_readability(results, title=title)
    if "swap_flip" in results.columns:  # causal_use: swaps, and the LRT ablation by distance
        swaps = results[results["part"] == "swap"].drop(columns="part")
        return causal_use_figure(swaps, tables.get("distances", pd.DataFrame(columns=["distance", "position",
                                                                                       "increase"])))
    return comparison_bars(results, title=title)


# ---- notebooks 00-03
def knob_symbol(schedule: str) -> str:
    """The letter of a schedule's knob (K, S, B), as its value writes it; ``value`` when it has none."""
    value = SCHEDULE_VALUES.get(schedule)
    return (value.symbol if value is not None else "") or "value"


def schedule_distance(sweeps: pd.DataFrame, positions: Mapping[str, pd.DataFrame] | None = None,
                      selected: Mapping[str, int] | None = None) -> Figure:
    """Distance of each approximate schedule to the exact logits as its knob grows, and where it is wrong.

    Left: ``schedule_sweep`` rows (one line per schedule: distance against K, S or B, log y; an
    exact zero ends the line and is marked ▼ on the axis) with ``selected`` values ringed. Right, when
    ``positions`` ({label: ``position_distance`` table}) is given: the distance per position, which
    shows multipass's exact prefix and blockwise's block edges.
    """
    _require(sweeps, ["schedule", "value", "distance"], "schedule_distance")
    fig, axes = new_figure(2 if positions else 1)
    schedules = _in_order(sweeps["schedule"])
    palette = dict(zip(schedules, sns.color_palette("deep", n_colors=len(schedules))))
    ax = axes[0]
    for schedule in schedules:
        rows = sweeps[sweeps["schedule"] == schedule].sort_values("value")
        _log_line(ax, rows["value"].astype(float), rows["distance"], "o-", ms=3, color=palette[schedule],
                  label=f"{schedule} ({knob_symbol(schedule)})")
        if selected and schedule in selected:
            chosen = rows[rows["value"] == selected[schedule]]
            ax.plot(chosen["value"].astype(float), _positive(chosen["distance"]), "o", ms=11, mfc="none",
                    mec="black", mew=1.5)
    ax.set(xlabel="K passes / S subsets / B block length", ylabel="||L - L*|| / ||L*||  (L* = sequential)",
           yscale="log", title="distance to the exact recurrence")
    ax.legend(fontsize=8)
    if positions:
        ax = axes[1]
        for label, frame in positions.items():
            _require(frame, ["position", "distance"], "schedule_distance positions")
            color = palette.get(label.split("(")[0])
            _log_line(ax, frame["position"], frame["distance"], "o-", ms=3, color=color, label=label)
        ax.set(xlabel="position t", ylabel="distance at position t", yscale="log", title="where it is wrong")
        ax.legend(fontsize=8)
    return fig


def kv_cache_step(pattern: np.ndarray, keys: np.ndarray, position: int, labels: Sequence[str] | None = None) -> Figure:
    """One decoding step seen from the cache: the attention pattern so far and the keys the cache holds.

    ``pattern`` (T, T): attention weights of one head (row t = query t); rows after ``position``
    are not computed yet and are blanked, the current row is outlined. ``keys`` (T, head_dim): the
    cached keys of that head; slots after ``position`` are still empty. ``labels`` name positions.
    """
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
    """What an LRT model learned, layer by layer (``lrt_layer_stats``, optionally ``lrt_gates``).

    Left: the residual injection ``alpha_l x + gamma_l m`` (init 1 and the configured gamma). Middle:
    mean local and feedback gates (init 1, dotted). The source layer is shaded. Right, when
    ``gates`` is given: the feedback gate per layer and position (position 0 reads no memory).
    """
    _require(stats, ["layer", "alpha", "gamma", "gate_local", "gate_feedback", "source"], "lrt_mechanism")
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
        ax.legend(fontsize=8, ncol=2, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    axes[1].axhline(1.0, color="black", ls=":", lw=1)
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


INTERVENTION_COLORS = {"swap": "#c44e52", "control": "#4c72b0", "mean": "#dd8452", "zero": "#8c8c8c"}


def swap_flips(swaps: pd.DataFrame, ax: Axes | None = None) -> Figure:
    """Answer flip rate per gated specimen and intervention (``causal_use``'s table: ``{kind}_flip`` with
    ``{kind}_low``/``{kind}_high``), beside the layer-0 probe accuracy and the untrained twin's: a probe
    that decodes the label while the swap leaves the answer alone shows decodability without use."""
    fig, axes = new_figure(1, panel=(7.0, 3.8)) if ax is None else (ax.figure, [ax])
    ax = axes[0]
    if swaps.empty:
        _empty(ax, "no gated specimen: nothing intervened on")
        return fig
    kinds = [k for k in INTERVENTION_COLORS if f"{k}_flip" in swaps.columns]
    _require(swaps, ["task", "scratch_updates", *[f"{k}_flip" for k in kinds]], "swap_flips")
    x = np.arange(len(swaps))
    width = 0.8 / (len(kinds) + 1)
    never = []  # kinds that flip no answer anywhere: no bar to see, so no legend colour; said in words
    for i, kind in enumerate(kinds):
        rate = swaps[f"{kind}_flip"].to_numpy()
        err = np.vstack([rate - swaps[f"{kind}_low"].to_numpy(), swaps[f"{kind}_high"].to_numpy() - rate])
        visible = bool(np.nan_to_num(swaps[f"{kind}_high"].to_numpy()).any() or np.nan_to_num(rate).any())
        if not visible:
            never.append(kind)
        ax.bar(x - 0.4 + width * (i + 0.5), rate, width, yerr=err, capsize=2, color=INTERVENTION_COLORS[kind],
               label=f"{kind} flip rate" if visible else None)
    for column, marker, color, label in (("probe_accuracy", "D", "black", "probe acc. (layer 0, suffix1)"),
                                         ("probe_twin_accuracy", "x", "dimgrey", "untrained twin's probe acc.")):
        if column in swaps and swaps[column].notna().any():
            ax.scatter(x + 0.4 - width / 2, swaps[column], marker=marker, color=color, zorder=3, label=label)
    ax.set_xticks(x, [f"{t}\n{int(s)} scratch" for t, s in zip(swaps["task"], swaps["scratch_updates"])],
                  fontsize=8, rotation=30, ha="right", rotation_mode="anchor")
    ax.set(ylim=(0, 1.05), ylabel="share of answers / probe accuracy",
           title="does the answer follow the memory? (95 % intervals)")
    if never:
        ax.text(0.5, 0.5, f"{', '.join(never)}: flip no answer of any specimen (rate 0, interval 0)",
                transform=ax.transAxes, ha="center", va="center", fontsize=8)
    ax.legend(fontsize=7, ncol=3, loc="lower center", bbox_to_anchor=(0.5, 1.08), frameon=False)
    return fig


def ablation_distance(frame: pd.DataFrame, axes: Sequence[Axes] | None = None) -> Figure:
    """How far back the recurrent state matters (``ablation_by_distance`` rows, a ``run`` column per
    specimen): left, the mean loss increase at t against how far back (d) the ablated memory lies;
    right, the increase at d = 1 (the position that reads it) by position."""
    fig, axes = new_figure(2, panel=(4.4, 3.6)) if axes is None else (axes[0].figure, list(axes))
    if frame.empty:
        for ax in axes:
            _empty(ax, "no gated LRT text specimen")
        return fig
    from matplotlib.ticker import MaxNLocator

    _require(frame, ["distance", "position", "increase"], "ablation_distance")
    runs = frame["run"] if "run" in frame else pd.Series("", index=frame.index)
    colors = sns.color_palette("deep", n_colors=max(1, runs.nunique()))
    for color, (name, rows) in zip(colors, frame.groupby(runs, sort=True)):
        by_d = rows.groupby("distance")["increase"].mean()
        axes[0].plot(by_d.index, by_d.to_numpy(), "o-", ms=3, color=color, label=str(name))
        first = rows[rows["distance"] == 1].groupby("position")["increase"].mean()
        axes[1].plot(first.index, first.to_numpy(), color=color, lw=1, label=str(name))
    for ax in axes:
        ax.axhline(0.0, color="black", lw=0.8, ls=":")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0].set(xlabel="d: the ablated memory lies d positions back", ylabel="loss increase at t (nats)",
                title="memory ablated d back")
    axes[1].set(xlabel="position t (reads the ablated memory)", ylabel="loss increase at t (nats)",
                title="d = 1, by position")
    if runs.nunique() > 1:
        axes[0].legend(fontsize=7)
    return fig


def causal_use_figure(swaps: pd.DataFrame, distances: pd.DataFrame) -> Figure:
    """``causal_use``'s figure: the swap flip rates (``swap_flips``) and the LRT ablation by distance
    (``ablation_distance``) side by side."""
    with sns.axes_style(STYLE):
        fig = Figure(figsize=(15.5, 4.2), layout="constrained")
        grid = fig.add_gridspec(1, 4)
        swap_ax = fig.add_subplot(grid[0, :2])
        distance_axes = [fig.add_subplot(grid[0, 2]), fig.add_subplot(grid[0, 3])]
    swap_flips(swaps, swap_ax)
    ablation_distance(distances, distance_axes)
    return fig


def answer_logits(frame: pd.DataFrame, title: str = "") -> Figure:
    """The answer's logits before and after interventions, for one example (``intervention_logits`` rows:
    ``intervention``, ``token``, ``logit``; ``clean`` is the unedited run): which way each edit moves it."""
    _require(frame, ["intervention", "token", "logit"], "answer_logits")
    fig, axes = new_figure(1, panel=(5.6, 3.4))
    ax = axes[0]
    table = frame.pivot_table(index="intervention", columns="token", values="logit", sort=False)
    colors = sns.color_palette("deep", n_colors=len(table.columns))
    x = np.arange(len(table))
    width = 0.8 / len(table.columns)
    for i, (token, color) in enumerate(zip(table.columns, colors)):
        ax.bar(x - 0.4 + width * (i + 0.5), table[token].to_numpy(), width, color=color, label=f"logit of {token}")
    ax.set_xticks(x, table.index, fontsize=8)
    ax.axhline(0.0, color="black", lw=0.8)
    ax.set(ylabel="logit at the label position", title=title)
    ax.legend(fontsize=8)
    return fig


# ---------------------------------------------------------------------------------------------- recurrence dynamics
def fixed_point_accuracy(results: Mapping[str, pd.DataFrame], trained_depth: int | None = None) -> Figure:
    """Answer accuracy against pass (log axis) per model, the exact recurrence's as a dashed line in the same
    colour: ``analysis.dynamics.fixed_point_quality(...).per_example`` frames by name. Where the line ends
    above the dash, the model reads its passes better than the fixed point they converge to."""
    fig, (ax,) = new_figure(1, panel=(7.2, 3.8))
    palette = sns.color_palette("tab10", len(results))
    for colour, (name, frame) in zip(palette, results.items()):
        _require(frame, ["pass", "schedule", "correct"], "fixed_point_accuracy")
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
    ``analysis.dynamics.lyapunov`` frames by name, one panel per path ("full", "memory")."""
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
    ``analysis.dynamics.fed_back_lens(...)["lens"]`` frames by name."""
    fig, axes = new_figure(len(results), panel=(4.2, 2.6))
    for ax, (name, frame) in zip(axes, results.items()):
        _require(frame, ["pass", "depth", "lens", value], "lens_by_pass")
        grid = frame[frame["lens"] == lens].pivot(index="depth", columns="pass", values=value)
        grid = grid.sort_index(ascending=False)
        sns.heatmap(grid, ax=ax, vmin=0, vmax=1, cmap="viridis", annot=grid.shape[1] <= 8, fmt=".2f",
                    cbar=ax is axes[-1], annot_kws={"fontsize": 7})
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("pass")
        ax.set_ylabel("depth (0 = input)")
    fig.suptitle(f"{lens} lens at the answer position: {value.replace('_', ' ')}", fontsize=10)
    return fig

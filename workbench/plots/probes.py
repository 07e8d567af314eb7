"""Figures of linear probes: what a layer's hidden state makes decodable."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ..validation import fail
from .base import (
    MARKERS,
    check_chance,
    in_order,
    key_label,
    legend_rows,
    name_colours,
    new_figure,
    panel_grid,
    probe_facets,
    require_columns,
    shared_legend,
)


def probe_heatmap(df: pd.DataFrame, value: str = "accuracy") -> Figure:
    """Probe ``value``, depth x condition: fed-back state lights the bottom rows."""
    require_columns(df, ["condition", "layer", value], "probe_heatmap")
    facets = probe_facets(df)
    fig, axes = new_figure(len(facets), panel=(1.2 + 1.1 * df["condition"].nunique(), 3.8))
    for ax, (title, group) in zip(axes, facets):
        table = group.pivot_table(index="layer", columns="condition", values=value, aggfunc="mean", sort=False)
        table = table.sort_index(ascending=False)[in_order(group["condition"])]
        sns.heatmap(table, ax=ax, vmin=0.0, vmax=1.0, cmap="viridis", annot=True, fmt=".2f", cbar=False,
                    annot_kws={"fontsize": 8})
        ax.set(title=title, xlabel="condition", ylabel="depth (0 = input)")
        ax.tick_params(axis="x", labelrotation=30)
    fig.colorbar(axes[0].collections[0], ax=axes, label=value, shrink=0.9)
    return fig


def _profile_groups(df: pd.DataFrame):
    group_keys = ["condition"] + [c for c in ("model", "task") if c in df.columns and df[c].nunique() > 1]
    return df.groupby(group_keys, sort=False)


def profile_takeaway(df: pd.DataFrame, depth: int = 0) -> str:
    """Best and worst series at ``depth``; equal at 2 decimals tie, so order crowns none."""
    require_columns(df, ["condition", "layer", "accuracy"], "profile_takeaway")
    at = df[df["layer"] == depth]
    if at.empty:
        fail("depth", depth, f"the probes cover depths {sorted(df['layer'].unique())}")
    means = {key_label(key): round(float(group["accuracy"].mean()), 2) for key, group in _profile_groups(at)}
    high, low = max(means.values()), min(means.values())
    best, worst = ([name for name, value in means.items() if value == v] for v in (high, low))
    if len(best) == len(means) > 1:
        text = f"at depth {depth}: all {len(means)} lines read {high:.2f}"
    elif len(best) > 1:
        text = f"at depth {depth}: {', '.join(best)} tie at {high:.2f}"
    else:
        text = f"at depth {depth}: {best[0]} reads best ({high:.2f})"
    if low != high:
        text += f", {', '.join(worst)} worst ({low:.2f})"
    if "majority" in at:
        text += f"; majority {at['majority'].mean():.2f}"
    return text


def probe_profile(df: pd.DataFrame, highlight_depth: int | None = None, title: str = "") -> Figure:
    """Accuracy against depth per series, dashed the control; a marker each: coinciding lines stay visible."""
    require_columns(df, ["condition", "layer", "accuracy"], "probe_profile")
    groups = list(_profile_groups(df))
    chunks = [groups[i:i + 6] for i in range(0, len(groups), 6)]
    if len(chunks) == 1:
        fig, axes = new_figure(1, panel=(6.0, 4.0))
    else:
        fig, axes = panel_grid(len(chunks), panel=(5.0, 4.6), sharey=True)
    colours = sns.color_palette("deep", n_colors=min(len(groups), 6))
    for ax, chunk in zip(axes, chunks):
        for i, (color, (key, group)) in enumerate(zip(colours, chunk)):
            group = group.sort_values("layer")  # the first drawn widest: a later line on top leaves it a rim
            ax.plot(group["layer"], group["accuracy"], marker=MARKERS[i], ms=9 - i, lw=2.6 - 0.3 * i, color=color,
                    label=key_label(key))
            if "accuracy_std" in group:
                ax.fill_between(group["layer"], group["accuracy"] - group["accuracy_std"],
                                group["accuracy"] + group["accuracy_std"], color=color, alpha=0.2, lw=0)
            if "control_accuracy" in group:
                ax.plot(group["layer"], group["control_accuracy"], "--", color=color, lw=1)
        if "control_accuracy" in df and df["control_accuracy"].notna().any():  # keyed only where one is drawn
            ax.plot([], [], "--", color="grey", lw=1, label="dashed: its control task")
        if "accuracy_std" in df and df["accuracy_std"].gt(0).any():
            ax.fill_between([], [], [], color="grey", alpha=0.2, lw=0, label="band: ± std over folds")
        if "majority" in df:
            ax.axhline(float(df["majority"].mean()), color="grey", ls=":", lw=1.5, label="majority")
        if highlight_depth is not None:
            ax.axvline(highlight_depth, color="black", lw=1, alpha=0.5, label=f"selected depth {highlight_depth}")
        ax.set(xlabel="depth (0 = input)", ylabel="probe accuracy", ylim=(0.0, 1.02),
               xticks=sorted(df["layer"].unique()))
        if len(chunks) == 1:
            ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        else:
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncols=2, frameon=False)
    if title:  # wrapped: a long takeaway never runs off the figure
        if len(chunks) == 1:
            axes[0].set_title(textwrap.fill(title, 70), fontsize=9)
        else:
            fig.suptitle(textwrap.fill(title, 120), fontsize=10)
    return fig


BOUNDED = ("suffix1",)  # the conditions the fed-back upper bound bounds at depth 0: one recurrent step
NO_FEEDBACK = ("baseline", "none")  # arms (else a name's first word) without feedback: no upper bound


def has_feedback(rows: pd.DataFrame, model: object) -> bool:
    """Whether ``model`` feeds state back (``arm``, else name, not in ``NO_FEEDBACK``)."""
    names = rows["arm"] if "arm" in rows else pd.Series([str(model)])
    return not names.astype(str).str.split().str[0].str.lower().isin(NO_FEEDBACK).all()


def layer0_comparison(df: pd.DataFrame, depth: int = 0, title: str | None = None,
                      models: Sequence[str] | None = None) -> Figure:
    """Probe accuracy at ``depth`` per condition (the FBT paper's headline figure); ``upper_bound`` only where it
    bounds (``BOUNDED``, depth 0)."""
    require_columns(df, ["condition", "layer", "accuracy"], "layer0_comparison")
    at = df[df["layer"] == depth]
    if at.empty:
        fail("depth", depth, f"the probes cover depths {sorted(df['layer'].unique())}")
    every = sorted(at["model"].unique(), key=str) if "model" in at else [None]
    colour_of = name_colours(every)
    if models is not None:
        unknown = sorted(set(models) - set(every), key=str)
        if unknown or not models:
            fail("models", list(models), f"must name some of {every}")
    models = [m for m in every if models is None or m in models]
    palette = [colour_of[m] for m in models]
    at = at if models == every else at[at["model"].isin(models)]
    tasks = in_order(at["task"]) if "task" in at else [None]
    lengths = sorted(at["scratch_updates"].unique()) if "scratch_updates" in at else [None]
    panels = [(task, length) for length in lengths for task in tasks
              if not _panel_rows(at, task, length).empty]
    fig, axes = panel_grid(len(panels), panel=(1.2 + 0.75 * at["condition"].nunique(), 3.2), ncols=len(tasks))
    width = 0.8 / len(models)
    marks = {"twin_accuracy": ({"marker": "o", "facecolors": "none", "edgecolors": "black"}, "untrained twin"),
             "upper_bound": ({"marker": "*", "color": "black"}, "upper bound (fed-back top layer)")}
    for ax, (task, length) in zip(axes, panels):
        sub = _panel_rows(at, task, length)
        heading = " / ".join(t for t in ("" if task is None else str(task),
                                        "" if length is None else f"{length} scratch lines") if t)
        conditions = in_order(sub["condition"])
        for m, (model, color) in enumerate(zip(models, palette)):
            rows = sub if model is None else sub[sub["model"] == model]
            if rows.empty:
                continue
            fed_back = has_feedback(rows, model)
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
                    values = values.where(rows.index.isin(BOUNDED) & (depth == 0) & fed_back)
                if values.notna().any():  # the twin left on its bar, the bound right: never on top of each other
                    shift = (-0.25 if column == "twin_accuracy" else 0.25) * width
                    ax.scatter(x + shift, values, s=30, zorder=4, label=label, **style)
        if "majority" in sub:
            ax.axhline(float(sub["majority"].mean()), color="grey", ls="--", lw=1.5, label="majority")
        ax.set_xticks(np.arange(len(conditions)), [str(c) for c in conditions], rotation=30, ha="right",
                      rotation_mode="anchor")
        ax.set(ylim=(0.0, 1.05), ylabel=f"probe accuracy at depth {depth}", title=heading)
    handles, labels = shared_legend(axes)  # every model and mark once, whichever panel drew it
    fig.legend(handles, labels, fontsize=8, loc="outside lower center", ncols=min(len(labels), 4))
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def _panel_rows(at: pd.DataFrame, task: object, length: object) -> pd.DataFrame:
    sub = at if task is None else at[at["task"] == task]
    return sub if length is None else sub[sub["scratch_updates"] == length]


def _scratch_takeaway(at: pd.DataFrame, condition: str, depth: int) -> str:
    """Per model accuracy at fewest and most scratch lines: does the lift hold?"""
    parts = []
    for model in sorted(at["model"].unique(), key=str):
        rows = at[at["model"] == model]
        lo, hi = rows["scratch_updates"].min(), rows["scratch_updates"].max()
        first, last = (rows.loc[rows["scratch_updates"] == n, "accuracy"].mean() for n in (lo, hi))
        parts.append(f"{model} {first:.2f}" + (f"->{last:.2f}" if hi > lo else ""))
    text = f"{condition} at depth {depth}, fewest->most scratch lines: " + ", ".join(parts)
    return text + (f"; majority {at['majority'].mean():.2f}" if "majority" in at else "")


def accuracy_vs_scratch(df: pd.DataFrame, condition: str = "suffix1", depth: int = 0,
                        groups: Mapping[str, Sequence[str]] | None = None, title: str | None = None) -> Figure:
    """Probe accuracy against scratch lines: a lift that holds with distance is carried by fed-back state."""
    require_columns(df, ["task", "model", "scratch_updates", "condition", "layer", "accuracy"], "accuracy_vs_scratch")
    at = df[(df["layer"] == depth) & (df["condition"] == condition)]
    if at.empty:
        raise ValueError(f"condition={condition!r}, depth={depth!r} is invalid: no rows for them")
    tasks = in_order(at["task"])
    models = in_order(at["model"])
    rows = dict(groups) if groups else {"": models}
    unknown = sorted({m for names in rows.values() for m in names} - set(models), key=str)
    if unknown:
        fail("groups", rows, f"{unknown} are not models of the table {models}")
    colour = name_colours(df["model"])
    cells = [(heading, names, task) for heading, names in rows.items() for task in tasks
             if at[(at["task"] == task) & at["model"].isin(names)].size]  # a panel only where a model has data
    fig, axes = panel_grid(len(cells), panel=(4.2, 3.6), ncols=len(tasks))
    for ax, (heading, names, task) in zip(axes, cells):
        sub = at[at["task"] == task]
        for model in names:
            lines = sub[sub["model"] == model].sort_values("scratch_updates")
            if lines.empty:
                continue
            color = colour[model]
            ax.plot(lines["scratch_updates"], lines["accuracy"], "o-", color=color, label=str(model))
            if "twin_accuracy" in lines:
                ax.plot(lines["scratch_updates"], lines["twin_accuracy"], "s--", color=color, alpha=0.7)
            if "upper_bound" in lines and has_feedback(lines, model):
                ax.plot(lines["scratch_updates"], lines["upper_bound"], ":", color=color)
        if "majority" in sub:
            ax.axhline(float(sub["majority"].mean()), color="grey", ls="--", lw=1, label="majority")
        xs = sorted(sub[sub["model"].isin(names)]["scratch_updates"].unique())
        ax.set(title=f"{task}" + (f" / {heading}" if heading else ""), xlabel="scratch lines",
               ylabel=f"accuracy at depth {depth}, {condition}", ylim=(0.0, 1.05), xticks=xs)
        pad = max(1, 0.08 * (xs[-1] - xs[0]))  # a point at the first or only x is drawn whole
        ax.set_xlim(xs[0] - pad, xs[-1] + pad)
    handles, labels = shared_legend(axes)  # every panel's series once: a model drawn only in a later panel too
    styles = {"o-": "solid: trained", "s--": "dashed: untrained twin", ":": "dotted: upper bound"}
    for fmt, words in styles.items():
        if fmt == "o-" or (fmt == "s--" and "twin_accuracy" in at) or (fmt == ":" and "upper_bound" in at):
            handles.append(Line2D([], [], color="grey", marker=fmt[0] if fmt[0] in "os" else None,
                                  ls=fmt.lstrip("os")))
            labels.append(words)
    fig.legend(handles, labels, fontsize=7, loc="outside lower center", ncols=min(len(labels), 5))
    title = _scratch_takeaway(at, condition, depth) if title is None else title
    if title:  # wrapped to the figure's width: a long takeaway is never cut off at its edges
        fig.suptitle(textwrap.fill(title, int(14 * fig.get_figwidth())), fontsize=10)
    return fig


def specimen_gates(df: pd.DataFrame, threshold: float, by: str = "arm", chance: float | None = None,
                   title: str = "") -> Figure:
    """Answer accuracy per specimen against the gate ``threshold``: below it, never probed."""
    require_columns(df, ["task", by, "scratch_updates", "gate_value"], "specimen_gates")
    check_chance(chance)
    if df.duplicated(["task", by, "scratch_updates"]).any():
        fail("by", by, "it leaves two specimens in one bar (try by='label')")
    tasks = in_order(df["task"])
    fig, axes = new_figure(len(tasks), panel=(4.0, 3.4))
    colour_of = name_colours(df[by])
    arms = list(colour_of)
    width = 0.8 / len(arms)
    for ax, task in zip(axes, tasks):
        sub = df[df["task"] == task]
        lengths = sorted(sub["scratch_updates"].unique())
        for a, (arm, color) in enumerate(colour_of.items()):
            rows = sub[sub[by] == arm].set_index("scratch_updates").reindex(lengths)
            x = np.arange(len(lengths)) - 0.4 + width * (a + 0.5)
            ax.bar(x, rows["gate_value"], width=width * 0.9, color=color, label=str(arm))
            if "answer_sequential" in rows:
                ax.scatter(x, rows["answer_sequential"], color="black", zorder=3, s=15,
                           label="exact recurrence" if a == len(arms) - 1 else None)
        ax.axhline(threshold, color="grey", ls="--", lw=1.5, label=f"gate {threshold:g}")
        if chance is not None:
            ax.axhline(chance, color="black", ls=":", lw=1.2, label=f"chance {chance:g}")
        ax.set_xticks(np.arange(len(lengths)), [str(n) for n in lengths])
        ax.set(title=str(task), xlabel="scratch lines", ylabel="held-out answer accuracy", ylim=(0.0, 1.05))
    handles, labels = shared_legend(axes)
    fig.legend(handles, labels, fontsize=8, loc="outside lower center", ncols=min(len(labels), 7))
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def _path_takeaway(df: pd.DataFrame, threshold: float | None) -> str:
    """How far C moves the trained probes, and on how many the ``threshold`` verdict flips."""
    trained = df[df["model"] == "trained"] if "model" in df else df
    ends = trained.sort_values("C").groupby(["task", "specimen"], sort=False)["accuracy"].agg(["first", "last"])
    text = (f"strongest vs weakest C within 0.01 on {int(((ends['first'] - ends['last']).abs() <= 0.01).sum())} "
            f"of {len(ends)} trained specimens")
    if threshold is None:
        return text
    plausible = trained[trained["plausible"].astype(bool)].groupby(["task", "specimen"])["accuracy"]
    flips = int(((plausible.min() < threshold) & (plausible.max() >= threshold)).sum())
    return text + f"; the {threshold:g} verdict flips with C on {flips}"


def coinciding_lines(lines: Mapping[tuple[str, bool], pd.DataFrame], within: float = 0.005) -> list[str]:
    """Legend words for groups of (specimen, twin?) paths drawn on top of each other (every point within
    ``within``); twins apart from trained."""
    groups: dict[tuple, list[pd.Series]] = {}
    for (_, twin), rows in lines.items():
        key = (twin, tuple(rows["C"].astype(float)), tuple(np.round(rows["accuracy"].to_numpy(dtype=float) / within)))
        groups.setdefault(key, []).append(rows["accuracy"])
    said = []
    for (twin, _, _), members in groups.items():
        if len(members) < 2:
            continue
        rows = members[0]
        kind = "dashed" if twin else "lines"
        flat = float(rows.max() - rows.min()) <= within
        said.append(f"{len(members)} {kind} at {rows.mean():.2f} (overlaid)" if flat
                    else f"{len(members)} {kind} coincide (overlaid)")
    return said


def regularisation_paths(df: pd.DataFrame, threshold: float | None = None, chance: float | None = None,
                         title: str | None = None) -> Figure:
    """Probe accuracy against ``C``: a verdict holds only if stable over the filled (plausible) ``C``. Lines that
    coincide keep a marker each and are counted in their panel's legend."""
    require_columns(df, ["task", "specimen", "C", "accuracy", "plausible"], "regularisation_paths")
    check_chance(chance)
    if chance is None and "majority" in df:
        chance = float(df["majority"].mean())
    keys = ["task"] + (["arm"] if "arm" in df.columns else [])
    facets = [(key_label(key), group) for key, group in df.groupby(keys, sort=False)]
    fig, axes = panel_grid(len(facets), panel=(3.8, 4.0))
    colors = name_colours(df["specimen"])
    for ax, (heading, sub) in zip(axes, facets):
        models = sub["model"] if "model" in sub else pd.Series("trained", index=sub.index, name="model")
        specimens = in_order(sub["specimen"])
        lines = {}
        for (specimen, model), rows in sub.groupby([sub["specimen"], models], sort=False):
            rows = rows.sort_values("C")
            twin = model != "trained"
            lines[specimen, twin] = rows
            # a marker and size of its own, the first drawn widest: lines that coincide each keep a visible rim
            i = specimens.index(specimen) % len(MARKERS)
            ax.plot(rows["C"], rows["accuracy"], color=colors[specimen], ls="--" if twin else "-", lw=1.2,
                    label=None if twin else str(specimen))
            for plausible, face in ((True, colors[specimen]), (False, "none")):
                at = rows[rows["plausible"] == plausible]
                ax.scatter(at["C"], at["accuracy"], s=(8 - i) ** 2, marker=MARKERS[i], zorder=3 + 0.01 * i,
                           facecolors=face, edgecolors=colors[specimen], linewidths=1.0)
        if threshold is not None:
            ax.axhline(threshold, color="grey", ls=":", lw=1.2)
        if chance is not None:  # over the lines: a twin at chance does not hide it
            ax.axhline(chance, color="black", ls="-.", lw=1, zorder=5)
        ax.set_xscale("log")
        low = min(0.4, chance - 0.05) if chance is not None else 0.4
        ax.set(title=heading, xlabel="inverse L2 strength C", ylabel="held-out probe accuracy", ylim=(low, 1.04))
        notes = [(Line2D([], [], ls="none"), words) for words in coinciding_lines(lines)]  # one over another
        handles, labels = legend_rows([list(zip(*ax.get_legend_handles_labels())), notes], ncols=2)
        ax.legend(handles, labels, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncols=2,
                  frameon=False)
    keys = {"solid: trained specimen": Line2D([], [], color="grey"),
            "dashed: its untrained twin": Line2D([], [], color="grey", ls="--"),
            "filled: C as good as the best (CV)": Line2D([], [], ls="none", marker="o", color="grey"),
            "open: other C": Line2D([], [], ls="none", marker="o", mfc="none", color="grey")}
    if threshold is not None:
        keys[f"claim needs {threshold:g}"] = Line2D([], [], color="grey", ls=":")
    if chance is not None:
        keys[f"majority {chance:g}"] = Line2D([], [], color="black", ls="-.", lw=1)
    fig.legend(list(keys.values()), list(keys), fontsize=8, loc="outside lower center", ncols=min(len(keys), 5))
    title = _path_takeaway(df, threshold) if title is None else title
    if title:
        fig.suptitle(title, fontsize=10)
    return fig

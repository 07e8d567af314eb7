"""Figures of the feedback map over many passes: fixed points, Lyapunov exponents, lenses."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, MaxNLocator

from ..validation import fail
from .base import (
    ARMS_PER_PANEL,
    LOG_TICKS,
    MAX_WIDTH,
    STYLE,
    ZERO_LABEL,
    Runs,
    check_chance,
    legend_rows,
    log_count_axis,
    log_line,
    named_runs,
    new_figure,
    require_columns,
    run_styles,
    settled_from,
    shared_legend,
    split_panels,
)


def run_families(names: list[str]) -> dict[str, list[str]]:
    """Rows of runs: past ``ARMS_PER_PANEL``, FBT apart from LRT (``lrt`` in the name)."""
    if len(names) <= ARMS_PER_PANEL:
        return {"": list(names)}
    families = ["LRT" if re.search(r"(^|_)lrt(_|$)", name) else "FBT" for name in names]
    return dict(_family_chunks(list(names), families))


def _eps(dtype: object) -> float:
    name = str(dtype).removeprefix("torch.")
    return 2.0 ** -7 if name == "bfloat16" else float(np.finfo(name).eps)


ROUNDING = 100  # within this many epsilons of its fixed point, a run is there within rounding
PLATEAU = 10  # ... from the pass it comes within this factor of its final floor


def _settled_in_float32(distance: np.ndarray, exact_below: float) -> bool:
    """Ends within ``ROUNDING`` float32 eps, falling < 2x over its last quarter (float64 keeps falling)."""
    tail = distance[-max(2, len(distance) // 4):]
    return (len(distance) >= 3 and exact_below < distance[-1] <= ROUNDING * _eps("float32")
            and tail[-1] > tail[0] / 2)


def contraction_takeaway(results: Runs, exact_below: float = 1e-9, dtype: str | None = None) -> str:
    """Pass from which each run stays below ``exact_below`` or, at a lower ``dtype``, near its floor (``PLATEAU``,
    ``ROUNDING``): float32 reads "within float32 rounding", not "never"."""
    runs = named_runs(results, "contraction_takeaway", ["pass", "fixed_point_distance"])
    reached, bounds, limits = {}, {}, []
    for name, frame in runs.items():
        frame = frame.sort_values("pass")
        distance = frame["fixed_point_distance"].to_numpy(dtype=float)
        given = dtype if dtype is not None else frame["dtype"].iloc[0] if "dtype" in frame else None
        if given is None and _settled_in_float32(distance, exact_below):
            given = "float32"
        below = exact_below if given is None else max(exact_below, min(ROUNDING * _eps(given),
                                                                       PLATEAU * distance[-1]))
        limits.append(below)
        precision = str(given).removeprefix("torch.")
        bounds[name] = f"< {below:g}" if below == exact_below else f"within {precision} rounding"
        k = settled_from(distance <= below)
        reached[name] = None if k is None else int(frame["pass"].iloc[k])
    passes, said = set(reached.values()), set(bounds.values())
    bound = f" ({said.pop()})" if len(said) == 1 else ""
    if passes == {None}:
        who = "no run is" if len(runs) > 1 else "the run is not"
        return f"{who} within {max(limits):g} of its fixed point by its last pass"
    if len(passes) == 1 and bound:
        return f"exact fixed point{bound} at pass {passes.pop()}" + (" for every run" if len(runs) > 1 else "")
    return f"exact fixed point{bound} at " + ", ".join(
        f"{name or 'the run'} " + (f"pass {k}" if k is not None else "never") + ("" if bound else f" ({bounds[name]})")
        for name, k in reached.items())


def contraction_curves(results: Runs, max_pass: int | None = None, depths: Mapping[str, int] | None = None,
                       note: str = "", chance: Mapping[str, float] | None = None) -> Figure:
    """Residual, fixed-point distance (log y) and loss against pass; ``depths``: label -> trained pass.
    Family rows share log ranges, not loss ranges: a diverging family must not flatten another."""
    runs = named_runs(results, "contraction_curves", ["pass", "delta", "fixed_point_distance"])
    for label, value in (chance or {}).items():
        if not (isinstance(value, (int, float)) and np.isfinite(value)):
            fail("chance", dict(chance), f"{label!r} must map to a finite loss")
    has_loss = any("loss" in f and f["loss"].notna().any() for f in runs.values())
    panels = [("delta", "residual\n||H^k - H^(k-1)|| / ||H^k||"),  # two lines: never taller than the panel
              ("fixed_point_distance", "distance to fixed point\n||H^k - H*|| / ||H*||")]
    ncols = 3 if has_loss else 2
    rows = run_families(list(runs))
    fig, flat = new_figure(ncols, len(rows), panel=(4.4, 3.6))
    grid = [flat[r * ncols:(r + 1) * ncols] for r in range(len(rows))]
    styles = run_styles(list(runs))
    last = 1
    for (family, names), axes in zip(rows.items(), grid):
        for name in names:
            frame = runs[name]
            if max_pass is not None:
                frame = frame[frame["pass"] <= max_pass]
            last = max(last, int(frame["pass"].max()) if len(frame) else 1)
            for ax, (column, _) in zip(axes, panels):
                log_line(ax, frame["pass"], frame[column], label=name or None, **styles[name])
            if has_loss and "loss" in frame:
                axes[2].plot(frame["pass"], frame["loss"], label=name or None, **styles[name])
        for ax, (_, ylabel) in zip(axes, panels):
            ax.set(xlabel="pass", ylabel=ylabel, yscale="log")
        if has_loss:
            axes[2].set(xlabel="pass", ylabel="loss (nats / token)")
            for label, value in (chance or {}).items():
                axes[2].axhline(value, color="black", ls=":", lw=1, label=label)
        if family:
            axes[0].set_title(family, loc="left", fontsize=9)
    for (label, depth), style in zip((depths or {}).items(), (":", "--", "-.")):
        for ax in flat:
            ax.axvline(depth, color="grey", ls=style, lw=1.2, label=label if ax is flat[0] else None)
    for ax in flat:
        if last > 10:
            log_count_axis(ax, last)
        else:  # passes are whole: no tick at pass 1.5
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    for column in range(2 if len(rows) > 1 else 0):  # one log scale down each column; each row its own loss scale
        low = min(g[column].get_ylim()[0] for g in grid)
        high = max(g[column].get_ylim()[1] for g in grid)
        for g in grid:
            g[column].set_ylim(low, high)
    handles, labels = shared_legend(flat)  # the runs and depths of every panel, and the loss panel's chance line
    if len(runs) > 1 or next(iter(runs)) or depths or chance or ZERO_LABEL in labels:
        ncols = min(len(labels), 4)  # the runs row by row, then the depths and chance lines from a new row
        entries = list(zip(handles, labels))
        handles, labels = legend_rows([[e for e in entries if e[1] in runs], [e for e in entries if e[1] not in runs]],
                                      ncols)
        fig.legend(handles, labels, fontsize=8, loc="outside lower center", ncols=ncols)
    if note:
        fig.suptitle("\n".join(textwrap.fill(line, 150) for line in note.splitlines()), fontsize=10)
    return fig


def sensitivity_decay(results: Runs, note: str = "") -> Figure:
    """Effect of perturbing the memory against distance (log y): below the dotted 1 it is forgotten."""
    runs = named_runs(results, "sensitivity_decay", ["distance", "effect"])
    fig, (ax,) = new_figure(1, panel=(8.0, 4.0))
    styles = run_styles(list(runs))
    for name, frame in runs.items():
        unused = bool((frame["effect"] == 0).all())
        label = (name or "effect") + (" (exactly 0: memory unused)" if unused else "")
        log_line(ax, frame["distance"], frame["effect"], marker="o", ms=3, label=label, **styles[name])
    ax.axhline(1.0, color="grey", ls=":", lw=1.5, label="injected perturbation")
    ax.set(xlabel="distance d (tokens after the perturbed position)", ylabel="effect ||Δm_{t0+d}|| / eps",
           yscale="log")
    last = max(float(f["distance"].max()) for f in runs.values())
    if last > 10:
        log_count_axis(ax, last)
    fig.legend(*shared_legend([ax]), fontsize=8, loc="outside right upper")
    if note:
        ax.set_title(note, fontsize=10)
    return fig


def _family_chunks(arms: list[str], families: list[str]) -> list[tuple[str, list[str]]]:
    """(family, arms) per panel, a large family cut into equal parts."""
    return [chunk for family in dict.fromkeys(families)
            for chunk in split_panels(family, [a for a, f in zip(arms, families) if f == family])]


ARM_WORDS = (  # fixed_point_study's arm names in words, piece by piece (first match wins)
    (r"^fbt_glu_phased$", "FBT GLU, phased mix"), (r"^fbt_glu$", "FBT GLU"), (r"^fbt_additive$", "FBT additive"),
    (r"^lrt$", "LRT"), (r"^(add_ft_|ft_|long_)", ""), (r"^mix", "recipe's mix"),
    (r"^share_(\d+)_(\d+)_(\d+)", r"passes 1/2/3: \1/\2/\3 %"), (r"^random_(\d+)_(\d+)", r"random depth \1-\2"),
    (r"^phased_(\d+)_(\d+)", r"phased, passes 2/3: \1/\2 %"), (r"^jitter_", "jitter "),
    (r"^fixed_point", "fixed-point target"), (r"^additive$", "additive fusion"), (r"^sequential$", "exact recurrence"),
    (r"_(\d+)$", r", \1 steps"),
)


def arm_words(arm: str, width: int = 16) -> str:
    """An arm's name in words ("ft_share_50_25_25" -> "passes 1/2/3: 50/25/25 %"), wrapped at ``width``."""
    for pattern, words in ARM_WORDS:
        arm = re.sub(pattern, words, arm)
    return textwrap.fill(arm.replace("_", " "), width)  # 16: two short lines, six arms side by side stay apart


def readable_takeaway(table: pd.DataFrame, readable: float = 0.95) -> str:
    """Arms whose every seed scores >= ``readable`` exact (descriptive: no interval)."""
    exact = table["accuracy_exact"]
    if "long_accuracy_exact" in table:  # the long family is scored on its long prompts (NaN: no answer there)
        exact = exact.where(table["family"] != "long", table["long_accuracy_exact"])
    worst = exact.fillna(0.0).groupby([table["arm"], table["family"]], sort=False).min()
    arms = [f"{arm_words(a, 80)} ({family})" for a, family in worst.index[worst >= readable]]
    return (f"every seed reads its fixed point (exact recurrence >= {readable:g}): {'; '.join(arms)}" if arms else
            f"no arm reads its fixed point on every seed (exact recurrence >= {readable:g})")


SLOTS_PER_ROW = 8  # arms side by side in one row of the readability figure (families packed in order)


def _pack_rows(chunks: list[tuple[str, list[str]]]) -> list[list[tuple[str, list[str]]]]:
    """Families in order, as many a row as fit ``SLOTS_PER_ROW`` arms: a family of 2 never leaves a row half empty."""
    rows: list[list[tuple[str, list[str]]]] = []
    used = SLOTS_PER_ROW
    for chunk in chunks:
        if used + len(chunk[1]) > SLOTS_PER_ROW:
            rows.append([])
            used = 0
        rows[-1].append(chunk)
        used += len(chunk[1])
    return rows


def fixed_point_readability(table: pd.DataFrame, title: str | None = None, readable: float = 0.95) -> Figure:
    """Per arm: accuracy at passes 1-3 and exact (a dot per seed) over its top Lyapunov exponent; a panel per
    family, as wide as its arms, ``SLOTS_PER_ROW`` arms a row."""
    require_columns(table, ["arm", "family", "accuracy_pass1", "accuracy_pass2", "accuracy_pass3", "accuracy_exact",
                     "lyapunov_top"], "fixed_point_readability")
    arms = list(dict.fromkeys(table["arm"]))
    chunks = _family_chunks(arms, [table.loc[table["arm"] == a, "family"].iloc[0] for a in arms])
    rows = _pack_rows(chunks)
    slots = max(sum(len(group) for _, group in row) for row in rows)
    with sns.axes_style(STYLE):
        fig = Figure(figsize=(min(MAX_WIDTH, 1.0 + 1.4 * slots), 1.0 + 3.2 * len(rows)), layout="constrained")
        grid = fig.add_gridspec(2 * len(rows), slots, height_ratios=[2.3, 0.9] * len(rows))
    columns = {"accuracy_pass1": ("pass 1 (STANDARD)", "#bbbbbb"), "accuracy_pass2": ("pass 2", "#7fa7d6"),
               "accuracy_pass3": ("pass 3", "#3d6fb0"), "accuracy_exact": ("exact recurrence", "#d1495b")}
    width = 0.8 / len(columns)
    lyapunov = table["lyapunov_top"].to_numpy()
    span = (min(lyapunov.min(), 0.0) * 1.1 - 0.01, max(lyapunov.max(), 0.0) * 1.1 + 0.01)
    first = None
    for r, row in enumerate(rows):
        start = 0
        for family, group in row:
            with sns.axes_style(STYLE):
                ax = fig.add_subplot(grid[2 * r, start:start + len(group)], sharey=first)
                lx = fig.add_subplot(grid[2 * r + 1, start:start + len(group)], sharex=ax)
            first = first or ax
            # the long family is scored on its long prompts: its bars are those columns (no bar: not measured there)
            at_length = family.startswith("long") and "long_accuracy_exact" in table
            for j, (column, (label, colour)) in enumerate(columns.items()):
                source = f"long_{column}" if at_length else column
                for i, arm in enumerate(group):
                    picked = table["arm"] == arm
                    values = (table.loc[picked, source].to_numpy() if source in table
                              else np.full(int(picked.sum()), np.nan))
                    x = i - 0.4 + width * (j + 0.5)
                    ax.bar(x, values.mean(), width, color=colour, label=label)
                    ax.scatter(np.full(len(values), x), values, color="black", s=8, zorder=3)
            ax.axhline(readable, color="#d1495b", ls="--", lw=1, label=f"readable bar {readable:g}")
            ax.axhline(0.5, color="grey", ls=":", lw=1, label="chance 0.5")
            ax.set_xlim(-0.5, len(group) - 0.5)  # a panel as wide as its arms: the same bar width everywhere
            ax.set_ylim(0, 1.05)
            heading = f"{family}, on its long prompts (no bar: not measured)" if at_length else family
            ax.set_title(textwrap.fill(heading, max(26, 22 * len(group))), fontsize=9, loc="left")
            for i, arm in enumerate(group):
                values = table.loc[table["arm"] == arm, "lyapunov_top"].to_numpy()
                lx.scatter(np.full(len(values), i), values, color="#3d6fb0", s=14, zorder=3)
            lx.axhline(0, color="grey", lw=0.8)
            lx.set_ylim(*span)
            lx.yaxis.set_major_locator(MaxNLocator(nbins=3))
            ax.set_xticks(range(len(group)), [arm_words(a) for a in group], fontsize=8)
            lx.tick_params(labelbottom=False)  # the names sit under the bars, the exponents under the names
            if start == 0:
                ax.set_ylabel("answer accuracy")
                lx.set_ylabel("top Lyapunov\nexponent", fontsize=8)
            else:  # the row's first panel carries the numbers: one scale along the row
                ax.tick_params(labelleft=False)
                lx.tick_params(labelleft=False)
            start += len(group)
    handles, labels = fig.axes[0].get_legend_handles_labels()
    named = dict(zip(labels, handles))  # one entry per label: every panel draws the same series
    order = [label for label, _ in columns.values()] + [f"readable bar {readable:g}", "chance 0.5"]
    named = {label: named[label] for label in order if label in named}
    named["one seed (dot)"] = Line2D([], [], ls="none", marker="o", ms=3, color="black")
    named["top Lyapunov exponent of the exact recurrence, one seed (< 0: perturbations die out)"] = Line2D(
        [], [], ls="none", marker="o", ms=4, color="#3d6fb0")
    fig.legend(named.values(), named.keys(), loc="outside lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle(readable_takeaway(table, readable) if title is None else title, fontsize=10)
    return fig


def _pass_and_exact(frame: pd.DataFrame) -> tuple[pd.Series, float]:
    require_columns(frame, ["pass", "schedule", "correct"], "fixed_point_accuracy")
    passes = frame[frame["schedule"] == "multipass"].groupby("pass")["correct"].mean()
    return passes, float(frame.loc[frame["schedule"] == "sequential", "correct"].mean())


def fixed_point_takeaway(results: Mapping[str, pd.DataFrame], margin: float = 0.05) -> str:
    """Models answering worse (by > ``margin``) at the fixed point than at their best pass."""
    curves = {name: _pass_and_exact(frame) for name, frame in results.items()}
    gaps = {name: (float(passes.max()), exact) for name, (passes, exact) in curves.items()}
    worse = {name: best - exact for name, (best, exact) in gaps.items() if best - exact > margin}
    if not worse:
        return f"every model answers as well at its fixed point as at its best pass (within {margin:g})"
    name = max(worse, key=worse.__getitem__)
    best, exact = gaps[name]
    return (f"the fixed point answers worse than the best pass in {len(worse)} of {len(gaps)} models "
            f"(worst: {name}, {exact:.2f} vs {best:.2f})")


EXACT_AT = 1.6  # the exact recurrence's column sits this factor right of the last pass on the log axis
EXACT_DODGE = 0.035  # decades between the exact marks of the models of a panel: equal values sit side by side


def fixed_point_accuracy(results: Mapping[str, pd.DataFrame], trained_depth: int | None = None,
                         chance: float | None = None, title: str = "",
                         groups: Mapping[str, Sequence[str]] | None = None) -> Figure:
    """Accuracy against pass per model, the exact recurrence a ◆ in an "exact" column past the last pass;
    ``groups``: title -> models, a panel each."""
    check_chance(chance)
    panels = dict(groups) if groups else {"": list(results)}
    unknown = sorted({n for names in panels.values() for n in names} - set(results))
    if unknown:
        fail("groups", dict(panels), f"{unknown} are not in results {list(results)}")
    fig, axes = new_figure(len(panels), panel=(7.2 if len(panels) == 1 else 4.6, 3.8), sharey=True)
    colours = dict(zip(results, sns.color_palette("tab10", len(results))))
    curves = {name: _pass_and_exact(frame) for name, frame in results.items()}
    last = max(int(passes.index.max()) for passes, _ in curves.values())
    exact_x = last * EXACT_AT
    for ax, (heading, names) in zip(axes, panels.items()):
        for j, name in enumerate(names):
            passes, exact = curves[name]
            ax.plot(passes.index, passes.to_numpy(), marker="o", ms=3, color=colours[name], label=name)
            at = exact_x * 10 ** (EXACT_DODGE * (j - (len(names) - 1) / 2))
            # one segment from the model's last pass to its ◆: never a full-width line over the curves
            ax.plot([passes.index[-1], at], [passes.iloc[-1], exact], ls="--", lw=1, color=colours[name],
                    marker="D", ms=6, markevery=[1], mec="white", mew=0.6, zorder=3)
        if trained_depth is not None:
            ax.axvspan(1, trained_depth, color="grey", alpha=0.12, label=f"trained depths 1-{trained_depth}")
        if chance is not None:
            ax.axhline(chance, color="black", ls=":", lw=1.2, label=f"chance {chance:g}")
        ax.set_xlabel("Jacobi pass (log)")
        ax.set_ylim(-0.03, 1.03)
        if heading:
            ax.set_title(heading, fontsize=9)
    for ax in axes:
        log_count_axis(ax, last)
        ticks = [t for t in LOG_TICKS if t <= last]
        ax.set_xlim(1 / 1.1, exact_x * 10 ** (EXACT_DODGE * len(results)) * 1.1)
        ax.xaxis.set_major_locator(FixedLocator([*ticks, exact_x]))
        ax.set_xticklabels([*map(str, ticks), "exact"])
        ax.axvspan(last * np.sqrt(EXACT_AT), ax.get_xlim()[1], color="grey", alpha=0.08, lw=0)  # the exact column
    axes[0].set_ylabel("answer accuracy")
    handles, labels = shared_legend(axes)
    models = [(h, label) for h, label in zip(handles, labels) if label in results]
    marks = [(h, label) for h, label in zip(handles, labels) if label not in results]
    marks += [(Line2D([], [], color="grey", marker="o", ms=3), "solid: accuracy at pass k"),  # not on the axes
              (Line2D([], [], color="grey", ls="--", lw=1, marker="D", ms=6, markevery=[1], mec="white"),
               "dashed to ◆: the exact recurrence (fixed point)")]
    handles, labels = legend_rows([models, marks], ncols=3)
    fig.legend(handles, labels, loc="outside lower center", ncols=3, fontsize=8, frameon=False)
    if title:
        fig.suptitle(textwrap.fill(title, 110), fontsize=10)
    return fig


def lyapunov_takeaway(results: Mapping[str, pd.DataFrame]) -> str:
    """Sign of each top exponent at the longest horizon: negative, perturbations die out."""
    finals = {}
    for name, frame in results.items():
        require_columns(frame, ["index", "path", "horizon", "exponent"], "lyapunov_takeaway")
        top = frame[frame["index"] == 1]
        for path, rows in top.groupby("path", sort=False):
            finals[f"{name} ({path})"] = float(rows.loc[rows["horizon"] == rows["horizon"].max(), "exponent"].mean())
    if not finals:
        raise ValueError("results hold no top exponent (index 1)")
    if all(v < 0 for v in finals.values()):
        return f"all {len(finals)} top exponents negative (at most {max(finals.values()):+.3f}): perturbations die out"
    growing = [f"{name} {v:+.3f}" for name, v in finals.items() if v >= 0]
    return f"{len(growing)} of {len(finals)} top exponents not negative ({', '.join(growing)}): perturbations persist"


def lyapunov_curves(results: Mapping[str, pd.DataFrame], title: str | None = None) -> Figure:
    """Top finite-time Lyapunov exponent against horizon per model, a panel per path."""
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
    title = lyapunov_takeaway(results) if title is None else title
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


LENS_VALUES = {"top1_is_answer": "share whose top token is the answer"}


def lens_takeaway(results: Mapping[str, pd.DataFrame], lens: str = "logit", value: str = "top1_is_answer",
                  drop: float = 0.2) -> str:
    """Models whose top-depth ``value`` falls by more than ``drop`` from its peak."""
    fades, keeps, last = [], [], 0
    for name, frame in results.items():
        require_columns(frame, ["pass", "depth", "lens", value], "lens_takeaway")
        top = frame[(frame["lens"] == lens) & (frame["depth"] == frame["depth"].max())].groupby("pass")[value].mean()
        last = max(last, int(top.index.max()))
        peak, end = float(top.max()), float(top.iloc[-1])
        if peak - end > drop:
            fades.append(f"{name} ({peak:.2f} at pass {int(top.idxmax())} -> {end:.2f})")
        else:
            keeps.append(name)
    if not fades:
        return f"at the top depth every model keeps the answer through pass {last}"
    return (f"at the top depth the answer fades by pass {last} in {', '.join(fades)}"
            + (f"; {', '.join(keeps)} keep{'s' if len(keeps) == 1 else ''} it" if keeps else ""))


def lens_by_pass(results: Mapping[str, pd.DataFrame], lens: str = "logit", value: str = "top1_is_answer",
                 title: str | None = None) -> Figure:
    """Lens reading at the answer position, depth x pass, a heatmap per model."""
    fig, axes = new_figure(len(results), panel=(4.2, 2.6))
    for ax, (name, frame) in zip(axes, results.items()):
        require_columns(frame, ["pass", "depth", "lens", value], "lens_by_pass")
        grid = frame[frame["lens"] == lens].pivot(index="depth", columns="pass", values=value)
        grid = grid.sort_index(ascending=False)
        sns.heatmap(grid, ax=ax, vmin=0, vmax=1, cmap="viridis", annot=grid.shape[1] <= 8, fmt=".2f",
                    cbar=False, annot_kws={"fontsize": 7})
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("pass")
        ax.set_ylabel("depth (0 = input)")
    # one colour bar beside every panel: on the last one, a wrapped grid's columns would shift apart
    what = LENS_VALUES.get(value, value.replace("_", " "))
    fig.colorbar(axes[0].collections[0], ax=axes, label=what, shrink=0.9 if len(axes) > 1 else 1.0)
    described = f"{lens} lens at the answer position: {what}"
    if title is None:
        title = f"{described}\n{lens_takeaway(results, lens, value)}" if value == "top1_is_answer" else described
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


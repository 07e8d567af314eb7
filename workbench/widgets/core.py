"""Explorers: controls redraw a figure and summary via a plain render function (no browser to test);
PNG in an ``Image``, not an ``Output``, shows alike in Jupyter, VS Code and Voilà."""

from __future__ import annotations

import base64
import functools
import html
import io
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ipywidgets as widgets
import pandas as pd
import torch
from matplotlib.figure import Figure

from .. import plots
from ..analysis.trajectory import memory_trajectory
from ..model import GPT
from ..validation import fail

Render = Callable[..., tuple[Figure, str]]

# width 0, min-width 100 %: the widest table cannot widen the flex box and push text past the output's edge
SUMMARY_CSS = (".wb-summary{width:0;min-width:100%;box-sizing:border-box;white-space:normal;"
               "overflow-wrap:anywhere;line-height:1.45}"
               ".wb-summary table{border-collapse:collapse;margin:4px 0;display:block;max-width:100%;overflow-x:auto}"
               ".wb-summary th,.wb-summary td{padding:2px 12px 2px 0;text-align:left;vertical-align:top;"
               "white-space:nowrap}"
               ".wb-summary pre{white-space:pre-wrap;word-break:break-word}")


def framed(summary: str) -> str:
    """A summary's HTML in its styled frame."""
    return f'<style>{SUMMARY_CSS}</style><div class="wb-summary">{summary}</div>'


def png_size(png: bytes) -> tuple[int, int]:
    """(width, height) of PNG bytes, from the header."""
    if png[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not PNG bytes")
    width, height = struct.unpack(">II", png[16:24])
    return int(width), int(height)


class Explorer(widgets.VBox):
    """Controls, HTML summary and figure; a render's own control changes do not re-enter it."""

    def __init__(self, controls: Mapping[str, widgets.ValueWidget], render: Render, dpi: int = 100) -> None:
        self.controls = dict(controls)
        for control in self.controls.values():  # labels not cut ("prefill pa…")
            control.style.description_width = "initial"
        self.render = render
        self.dpi = dpi
        self.summary = widgets.HTML(layout=widgets.Layout(max_width="100%", overflow="auto"))
        self.image = widgets.Image(format="png", layout=widgets.Layout(max_width="100%", height="auto"))
        self.figure: Figure | None = None
        self._refreshing = False
        super().__init__([widgets.HBox(list(self.controls.values())), self.summary, self.image])
        for control in self.controls.values():
            control.observe(self._on_change, names="value")
        self.refresh()

    def _on_change(self, change: dict[str, Any]) -> None:
        if not self._refreshing:
            self.refresh()

    def refresh(self) -> None:
        """Render the controls' values and show the result."""
        self._refreshing = True
        try:
            figure, summary = self.render(**{name: c.value for name, c in self.controls.items()})
        finally:
            self._refreshing = False
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=self.dpi, bbox_inches="tight")  # a legend outside the axes stays
        png = buffer.getvalue()
        self.image.layout.width = f"{png_size(png)[0]}px"  # natural size: a VBox would stretch it to the cell
        self.figure, self.summary.value, self.image.value = figure, framed(summary), png


def static_twin(explorer: Explorer) -> dict[str, str]:
    """The current view as ``text/html`` and ``image/png`` output data."""
    png = explorer.image.value
    width, _ = png_size(png)
    encoded = base64.b64encode(png).decode("ascii")
    page = (f'{explorer.summary.value}<img src="data:image/png;base64,{encoded}" width="{width}" '
            'style="max-width:100%;height:auto" alt="the explorer at its default setting">')
    return {"text/html": page, "image/png": encoded}


def with_static_twin(explorer: Explorer) -> None:
    """Show ``explorer`` with its static twin as fallback where widget state is stripped (GitHub)."""
    from IPython.display import display

    bundle = {**explorer._repr_mimebundle_(), **static_twin(explorer),
              "text/plain": "an explorer: run the notebook to move it (its default view is the figure)"}
    display(bundle, raw=True)


def format_number(value: float) -> str:
    """NaN as an em dash, tiny residuals in scientific notation."""
    if pd.isna(value):
        return "—"
    return f"{value:.3g}" if 1e-3 <= abs(value) < 1e4 or value == 0 else f"{value:.2e}"


# ---------------------------------------------------------------------------------------------- contraction
def contraction_explorer(results: Mapping[str, pd.DataFrame], chance: Mapping[str, float] | None = None) -> Explorer:
    """Pick a ``pass_dynamics`` run and pass; ``chance``: label -> loss without context."""
    if not results:
        raise ValueError("results is empty")
    for name, frame in results.items():
        if "pass" not in frame or frame.empty:
            raise ValueError(f"results[{name!r}] needs rows and a 'pass' column")
    last = max(int(frame["pass"].max()) for frame in results.values())
    controls = {
        "run": widgets.Dropdown(options=list(results), description="run"),
        "pass_": widgets.IntSlider(value=last, min=1, max=last, description="pass", continuous_update=False),
    }

    def render(run: str, pass_: int) -> tuple[Figure, str]:
        frame = results[run]
        shown = min(pass_, int(frame["pass"].max()))
        row = frame[frame["pass"] == shown].iloc[0]
        note = f" (the run ends at pass {shown})" if shown < pass_ else ""
        numbers = ", ".join(f"{label} {format_number(row[col])}" for col, label in
                            (("delta", "residual"), ("fixed_point_distance", "distance to fixed point"),
                             ("contraction_rate", "rate"), ("loss", "loss")) if col in row)
        summary = f"<b>{html.escape(run)}</b>, pass {shown}{note}: {numbers}"
        takeaway = f"{run}: {plots.contraction_takeaway({run: frame})}"
        return plots.contraction_curves({run: frame}, max_pass=shown, note=takeaway, chance=chance), summary

    return Explorer(controls, render)


# ---------------------------------------------------------------------------------------------- probes
def probe_explorer(compute: Callable[[str, str], pd.DataFrame], tasks: Sequence[str],
                   conditions: Sequence[str], task: str | None = None, condition: str | None = None,
                   depth: int = 0) -> Explorer:
    """Probe accuracy by depth per task and condition; ``compute`` (slow) runs once a pair."""
    if not tasks or not conditions:
        raise ValueError(f"tasks={list(tasks)!r} and conditions={list(conditions)!r} must both be non-empty")
    for name, value, allowed in (("task", task, tasks), ("condition", condition, conditions)):
        if value is not None and value not in allowed:
            fail(name, value, f"must be one of {list(allowed)}")
    computed = functools.cache(compute)
    controls = {
        "task": widgets.Dropdown(options=list(tasks), value=task or tasks[0], description="task"),
        "condition": widgets.Dropdown(options=list(conditions), value=condition or conditions[0],
                                      description="condition"),
        "depth": widgets.IntSlider(value=depth, min=0, max=max(depth, 1), description="depth",
                                   continuous_update=False),
    }

    def render(task: str, condition: str, depth: int) -> tuple[Figure, str]:
        frame = computed(task, condition)
        if frame.empty or "layer" not in frame or "accuracy" not in frame:
            raise ValueError(f"compute({task!r}, {condition!r}) returned no 'layer' and 'accuracy' rows")
        deepest = int(frame["layer"].max())
        if controls["depth"].max != deepest:
            controls["depth"].max = deepest  # clamps the value; the explorer does not re-enter
        depth = min(depth, deepest)
        lines = []
        for _, row in frame[frame["layer"] == depth].iterrows():
            who = f"{html.escape(str(row['model']))}: " if "model" in row else ""
            extra = ", ".join(f"{col.replace('_', ' ')} {format_number(row[col])}"
                              for col in ("control_accuracy", "selectivity", "majority") if col in row)
            std = f" ± {format_number(row['accuracy_std'])}" if "accuracy_std" in row else ""
            lines.append(f"{who}accuracy {format_number(row['accuracy'])}{std}; {extra}")
        summary = (f"<b>{html.escape(task)}</b>, {html.escape(condition)}, depth {depth}<br>"
                   + "<br>".join(lines))
        title = f"{task}, {condition}: {plots.profile_takeaway(frame, depth)}"
        return plots.probe_profile(frame, highlight_depth=depth, title=title), summary

    return Explorer(controls, render)


# ---------------------------------------------------------------------------------------------- tokens
def token_stepper(model: GPT, idx: torch.Tensor, decode: Callable[[int], str] | None = None,
                  top_k: int = 5) -> Explorer:
    """Memory read and written per token of ``idx`` (B, T), and top predictions; runs once."""
    trajectory = memory_trajectory(model, idx, top_k=top_k)
    B, T = idx.shape
    controls: dict[str, widgets.ValueWidget] = {
        "position": widgets.IntSlider(value=0, min=0, max=T - 1, description="position", continuous_update=False)}
    if B > 1:
        controls["example"] = widgets.IntSlider(value=0, min=0, max=B - 1, description="example",
                                                continuous_update=False)
    rows = trajectory.set_index(["example", "position"])

    def name(token: int) -> str:
        return html.escape(repr(decode(int(token)))) if decode else str(int(token))

    def render(position: int, example: int = 0) -> tuple[Figure, str]:
        row = rows.loc[(example, position)]
        if row["reads"]:
            previous = rows.loc[(example, position - 1)]
            reads = (f"reads m<sub>{position - 1}</sub> (state norm {format_number(previous['state_norm'])}); "
                     f"cos(m<sub>{position - 1}</sub>, m<sub>{position}</sub>) = {format_number(row['cosine_prev'])}")
        else:
            reads = "reads no memory (plain position)"
        top = ", ".join(f"{name(tok)} {p:.2f}" for tok, p in zip(row["top_tokens"], row["top_probs"]))
        summary = (f"<b>t = {position}</b>, token {name(row['token'])}: {reads}; produces m<sub>{position}</sub> "
                   f"(state norm {format_number(row['state_norm'])})<br>next: {top}")
        return plots.token_steps(trajectory, position, example, decode), summary

    return Explorer(controls, render)

"""Front-end of notebook 05b: edit one example's memory, watch its answer."""

from __future__ import annotations

import html

import ipywidgets as widgets
from matplotlib.figure import Figure

from .. import plots
from ..experiments.decodability import example_logits, mate_rows
from ..model import GPT
from ..tasks.base import Batch
from .core import Explorer, format_number


def _summary(frame, example: int, label: str) -> str:
    """Per edit the true label's logit margin, and whether the answer holds."""
    parts = []
    for name, rows in frame.groupby("intervention", sort=False):
        true = rows.loc[rows["true"], "logit"].iloc[0]
        other = rows.loc[~rows["true"], "logit"].max()
        verdict = f"answers {html.escape(repr(label))}" if true >= other else "<b>flips</b>"
        parts.append(f"{html.escape(name)}: margin {format_number(true - other)} ({verdict})")
    return f"<b>example #{example}</b> (label {html.escape(label)!r}) — " + "; ".join(parts)


def flip_takeaway(frame) -> str:
    """Which edits flip the answer."""
    flipped = [name for name, rows in frame.groupby("intervention", sort=False)
               if rows.loc[rows["true"], "logit"].iloc[0] < rows.loc[~rows["true"], "logit"].max()]
    edits = [name for name in dict.fromkeys(frame["intervention"]) if name != "clean"]
    if "clean" in flipped:
        return "wrong before any edit"
    if not flipped:
        return "no edit flips the answer"
    verb = "flips" if len(flipped) == 1 else "flip"
    return ("only " if len(flipped) < len(edits) else "") + f"{' and '.join(flipped)} {verb} the answer"


def intervention_explorer(model: GPT, batch: Batch, site: str = "memory") -> Explorer:
    """Sliders over ``example_logits``; the source starts at example 0's swap mate."""
    if batch.label_positions is None or batch.labels is None:
        raise ValueError("batch must have labels and label_positions")
    if int(batch.label_positions.min()) != int(batch.label_positions.max()):
        raise ValueError("batch must hold one label position, so sources align")
    p = int(batch.label_positions[0])
    names = batch.label_names or [str(i) for i in range(int(batch.labels.max()) + 1)]
    options = [(f"#{j}: label {names[int(batch.labels[j])]!r}, group {int(batch.groups[j])}", j)
               for j in range(len(batch))]
    controls = {
        "example": widgets.IntSlider(value=0, min=0, max=len(batch) - 1, description="example",
                                     continuous_update=False),
        "position": widgets.IntSlider(value=p, min=1, max=p, description="edit at", continuous_update=False),
        "source": widgets.Dropdown(options=options, value=int(mate_rows(batch)[0][0]), description="memory of"),
    }

    def render(example: int, position: int, source: int) -> tuple[Figure, str]:
        frame = example_logits(model, batch, example, position, source, site)
        label = names[int(batch.labels[example])]
        title = f"#{example} (label {label!r}), memory edited at {position}: {flip_takeaway(frame)}"
        return plots.answer_logits(frame, title=title), _summary(frame, example, label)

    return Explorer(controls, render)

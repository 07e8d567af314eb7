"""Front-ends of the results notebooks (07-09): reasoning traces and recipe outcomes."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

import ipywidgets as widgets
import pandas as pd
from IPython.display import HTML
from matplotlib.figure import Figure

from .. import experiments, plots
from ..analysis.traces import TRACE_COLUMNS
from ..experiments.results_table import gates_table
from ..plots.base import regime_order
from .core import Explorer, format_number

SUMMARY_FIELDS = ("claim", "setting", "number", "verdict")


# ---------------------------------------------------------------------------------------------- traces
def trace_explorer(traces: pd.DataFrame, prompts: Sequence[str] | None = None,
                   answers: Sequence[int] | None = None) -> Explorer:
    """Traces by regime and example; ``prompts``/``answers`` indexed like the traced batch."""
    missing = [c for c in TRACE_COLUMNS if c != "lines" and c not in traces.columns]  # lines: shown when recorded
    if missing or traces.empty:
        raise ValueError(f"traces is empty or lacks {missing}")
    examples = sorted(int(e) for e in traces["example"].unique())
    for name, given in (("prompts", prompts), ("answers", answers)):
        if given is not None and len(given) <= examples[-1]:
            raise ValueError(f"{name} has {len(given)} entries; traces reach example {examples[-1]}")
    regimes = regime_order(traces["regime"])
    controls: dict[str, widgets.ValueWidget] = {
        "regime": widgets.Dropdown(options=regimes, description="regime"),
        "example": widgets.IntSlider(value=examples[0], min=examples[0], max=examples[-1], description="example",
                                     continuous_update=False),
    }
    runs = list(dict.fromkeys(traces["run"])) if "run" in traces else []
    if len(runs) > 1:
        controls["run"] = widgets.Dropdown(options=runs, description="run")

    def render(regime: str, example: int, run: str | None = None) -> tuple[Figure, str]:
        frame = traces if run is None else traces[traces["run"] == run]
        rows = frame[(frame["regime"] == regime) & (frame["example"] == example)]
        head = f"<b>{html.escape(regime)}</b>, example {example}" + (f" ({html.escape(run)})" if run else "")
        if rows.empty:
            return plots.trace_example(frame, examples[0], regime), f"{head}: no trace recorded"
        row = rows.iloc[0]
        verdict = ("right" if row["correct"] else "wrong") if row["answered"] else "no answer line written"
        question = "" if prompts is None else html.escape(str(prompts[example]))
        expected = "" if answers is None else f"; expected answer {int(answers[example])}"
        lines = "" if "lines" not in row else f" ({int(row['lines'])} line{'' if row['lines'] == 1 else 's'})"
        summary = (f"{head}: length {int(row['length'])} tokens{lines} before the answer marker; {verdict}{expected}"
                   f"<pre>{question}{html.escape(str(row['text']))}</pre>")
        return plots.trace_example(frame, example, regime), summary

    return Explorer(controls, render)


# ---------------------------------------------------------------------------------------------- recipes
def recipe_record(name: str, summary: Mapping[str, Any]) -> HTML:
    """A recipe's verdict in sight, the rest of its record folded in a ``<details>``."""
    missing = [f for f in SUMMARY_FIELDS if f not in summary]
    if missing:
        raise ValueError(f"summary lacks {missing}: pass experiments.ensure({name!r})")
    rows = "".join(f"<tr><th style='text-align:left'>{key}</th><td style='text-align:left'>"
                   f"{html.escape(str(summary[key]))}</td></tr>" for key in ("claim", "setting", "rule", "number")
                   if key in summary)
    gates = gates_table({name: summary})
    checks = "" if gates.empty else ("<p>competence checks (all must pass before a verdict):</p>" + gates.drop(
        columns="recipe").to_html(index=False, float_format=format_number, border=0))
    return HTML(f"<table><tr><td><b>{html.escape(name)}</b></td><td>{html.escape(str(summary['verdict']))}</td></tr>"
                f"</table><details><summary>the record: claim, setting, decision rule, our number, competence "
                f"checks</summary><table>{rows}</table>{checks}</details>")


def recipe_explorer(summaries: Mapping[str, Mapping[str, Any]], tables: Mapping[str, Mapping[str, pd.DataFrame]],
                    max_rows: int = 12) -> Explorer:
    """One recipe at a time: record, results table (``max_rows``) and figure."""
    if not summaries:
        raise ValueError("summaries is empty")
    absent = [name for name in summaries if name not in tables]
    if absent:
        raise ValueError(f"tables lacks {absent}")
    for name, summary in summaries.items():
        missing = [f for f in SUMMARY_FIELDS if f not in summary]
        if missing:
            raise ValueError(f"summaries[{name!r}] lacks {missing}")
    controls = {"recipe": widgets.Dropdown(options=list(summaries), description="recipe")}

    def render(recipe: str) -> tuple[Figure, str]:
        s = summaries[recipe]
        # a recipe's table mixes row kinds (causal_use: sites, streams, text ablations): a cell a kind lacks is blank
        table = tables[recipe]["results"].to_html(index=False, max_rows=max_rows, float_format=format_number,
                                                  border=0, na_rep="")
        gates = gates_table({recipe: s})
        gate_html = "" if gates.empty else "gates (all must pass before a verdict):" + gates.drop(
            columns="recipe").to_html(index=False, float_format=format_number, border=0)
        note = (" — a gate failed, so the claim was not tested and no other verdict is drawn"
                if not gates.empty and not gates["passed"].all() else "")
        rule = f"decision rule: {html.escape(str(s['rule']))}<br>" if "rule" in s else ""
        summary = (f"<b>{html.escape(recipe)}</b>: verdict <b>{html.escape(str(s['verdict']))}</b>{note}<br>"
                   f"claim: {html.escape(str(s['claim']))}<br>setting: {html.escape(str(s['setting']))}<br>"
                   f"{rule}{gate_html}our number: {html.escape(str(s['number']))}{table}")
        return experiments.experiment_figure(tables[recipe], title=recipe, summary=s), summary

    return Explorer(controls, render)

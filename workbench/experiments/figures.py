"""A recipe's figure from its stored tables (here, not in ``plots``: only this layer may import recipes)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pandas as pd

from .common import bar_figure
from .pass_mix_study import STUDY_FIELDS, study_figure
from .recipes import crosses, fbt_fixed_point_text, fbt_prefill_gain, fbt_regimes, lrt_memory_sanity, reasoning_traces
from .recipes.causal_use import causal_use_figure
from .recipes.fbt_text import intervals_figure
from .recipes.layer0_probes import probe_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure


# the text recipes that read fbt_text's specimens: their figure is drawn from their results table alone
READING_FIGURES = {"fbt_regimes": fbt_regimes.regimes_figure, "fbt_prefill_gain": fbt_prefill_gain.gain_figure,
                   "fbt_fixed_point_text": fbt_fixed_point_text.fixed_point_figure}
# a recipe whose bar figure is titled by its takeaway, computed from its results table as its analyze does
TAKEAWAYS = {"crosses": crosses.takeaway, "lrt_memory_sanity": lrt_memory_sanity.takeaway}


def experiment_figure(tables: Mapping[str, pd.DataFrame], title: str = "",
                      summary: Mapping[str, Any] | None = None) -> Figure:
    """Chosen by the tables' names and columns; ``summary`` adds a verdict, a baseline or a title."""
    from .. import plots  # on first use: ``import workbench.experiments`` loads no seaborn

    if "pass_dynamics" in tables:
        if summary is not None and STUDY_FIELDS <= set(summary):  # a pass-mix study's own summary
            return study_figure(tables["pass_dynamics"], summary)
        return plots.contraction_curves(dict(tuple(tables["pass_dynamics"].groupby("run", sort=False))))
    if "traces" in tables:
        if {"arm", "decoding"} <= set(tables["traces"].columns):  # reasoning_traces' own: as the recipe drew it
            return reasoning_traces.traces_figure(tables["traces"], tables.get("lines"))
        return plots.trace_lengths(tables["traces"])
    if "intervals" in tables:  # fbt_text: the intervals its verdict reads
        return intervals_figure(tables["intervals"], title if summary is None else summary["verdict"])
    if "results" not in tables:
        raise ValueError(f"tables holds {sorted(tables)}: expected 'results'")
    results = tables["results"]
    recipe = (summary or {}).get("recipe")
    if recipe in READING_FIGURES:  # a text reading recipe: the intervals in its results table, titled by its verdict
        return READING_FIGURES[recipe](results, summary["verdict"])
    if {"condition", "layer", "label"} <= set(results.columns):  # layer0_probes: a colour per specimen
        said = None if summary is None else f"{summary.get('recipe', title)}: {summary['verdict']}"
        return probe_figure(results, said)
    if {"condition", "layer"} <= set(results.columns):  # any other probe table
        return plots.layer0_comparison(results)
    if {"accuracy_exact", "lyapunov_top", "family"} <= set(results.columns):  # fixed_point_study's runs
        return plots.fixed_point_readability(results)  # titled by its takeaway, as the recipe draws it
    if "swap_flip" in results.columns:  # causal_use: swaps, its positive control, and the LRT ablation by distance
        swaps, controls = (results[results["part"] == part].drop(columns="part") for part in ("swap",
                                                                                               "positive control"))
        return causal_use_figure(swaps, controls, tables.get("distances", pd.DataFrame(
            columns=["distance", "position", "increase"])))
    return bar_figure(results, title=TAKEAWAYS[recipe](results) if recipe in TAKEAWAYS else title)

"""The figure of a recipe's stored tables; here, not in ``plots``, because only this layer may import recipes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import pandas as pd

from .common import bar_figure
from .recipes.causal_use import causal_use_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def experiment_figure(tables: Mapping[str, pd.DataFrame], title: str = "") -> Figure:
    """A recipe's figure from the tables it wrote, chosen by their names and columns."""
    from .. import plots  # on first use: ``import workbench.experiments`` loads no seaborn

    if "pass_dynamics" in tables:
        return plots.contraction_curves(dict(tuple(tables["pass_dynamics"].groupby("run", sort=False))))
    if "traces" in tables:
        return plots.trace_lengths(tables["traces"])
    if "bars" in tables:  # a wide results table with its bars saved beside it (fbt_language.bars)
        return bar_figure(tables["bars"], title=title)
    if "results" not in tables:
        raise ValueError(f"tables holds {sorted(tables)}: expected 'results' (and maybe 'pass_dynamics' or 'traces')")
    results = tables["results"]
    if {"condition", "layer"} <= set(results.columns):
        return plots.layer0_comparison(results)
    if {"accuracy_exact", "lyapunov_top", "family"} <= set(results.columns):  # fixed_point_study's runs
        return plots.fixed_point_readability(results, title=title)
    if "swap_flip" in results.columns:  # causal_use: swaps, its positive control, and the LRT ablation by distance
        swaps, controls = (results[results["part"] == part].drop(columns="part") for part in ("swap",
                                                                                               "positive control"))
        return causal_use_figure(swaps, controls, tables.get("distances", pd.DataFrame(
            columns=["distance", "position", "increase"])))
    return bar_figure(results, title=title)

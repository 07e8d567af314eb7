"""Figures the notebooks, the widgets and the CLI share: each draws what an analysis function returned.

Every function takes the DataFrame (or a dict of named DataFrames, to compare runs) that
``workbench.analysis`` or ``workbench.train`` produced and returns a ``matplotlib.figure.Figure``,
built without ``pyplot`` (nothing to close, nothing shown twice). Styling is seaborn's ``whitegrid``.
One module per subject; every figure is also a name of this package (``wb.plots.loss_curves``):

- ``probes``: ``probe_heatmap``, ``probe_profile``, ``layer0_comparison``, ``accuracy_vs_scratch``,
  ``specimen_gates``, ``regularisation_paths``;
- ``training``: ``loss_curves``, ``loss_vs_flops``, ``pass_losses`` and the ``LossFigure`` callback;
- ``schedules``: ``schedule_distance``, ``jacobi_settling``, ``regime_losses``;
- ``mechanisms``: ``lrt_mechanism``, ``kv_cache_step``, ``token_steps``;
- ``dynamics``: ``contraction_curves``, ``sensitivity_decay``, ``fixed_point_readability``,
  ``fixed_point_accuracy``, ``lyapunov_curves``, ``lens_by_pass``;
- ``traces``: ``trace_lengths``, ``trace_example``;
- ``interventions``: ``swap_flips``, ``ablation_distance``, ``answer_logits``;
- ``base``: the shared frame (``new_figure``, panel grids, log axes that mark exact zeros).

A recipe's own figure lives with its recipe; the figure of a recipe's stored tables is
``experiments.experiment_figure``, which reads which recipe wrote them.
"""

from .base import LOG_TICKS, MAX_COLUMNS, PANEL, STYLE, ZERO_LABEL, Runs, new_figure
from .dynamics import (
    contraction_curves,
    fixed_point_accuracy,
    fixed_point_readability,
    lens_by_pass,
    lyapunov_curves,
    sensitivity_decay,
)
from .interventions import INTERVENTION_COLORS, ablation_distance, answer_logits, swap_flips
from .mechanisms import kv_cache_step, lrt_mechanism, token_steps
from .probes import (
    BOUNDED,
    accuracy_vs_scratch,
    layer0_comparison,
    probe_heatmap,
    probe_profile,
    regularisation_paths,
    specimen_gates,
)
from .schedules import jacobi_settling, knob_symbol, regime_losses, schedule_distance
from .traces import trace_example, trace_lengths
from .training import CURVE_AXES, LOSS_AXES, LossFigure, loss_curves, loss_vs_flops, pass_losses

__all__ = [
    "BOUNDED", "CURVE_AXES", "INTERVENTION_COLORS", "LOG_TICKS", "LOSS_AXES", "LossFigure", "MAX_COLUMNS",
    "PANEL", "Runs", "STYLE", "ZERO_LABEL", "ablation_distance", "accuracy_vs_scratch", "answer_logits",
    "contraction_curves", "fixed_point_accuracy", "fixed_point_readability", "jacobi_settling", "knob_symbol",
    "kv_cache_step", "layer0_comparison", "lens_by_pass", "loss_curves", "loss_vs_flops", "lrt_mechanism",
    "lyapunov_curves", "new_figure", "pass_losses", "probe_heatmap", "probe_profile", "regime_losses",
    "regularisation_paths", "schedule_distance", "sensitivity_decay", "specimen_gates", "swap_flips", "token_steps",
    "trace_example", "trace_lengths",
]

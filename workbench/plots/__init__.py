"""Figures the notebooks, the widgets and the CLI share: each draws what an analysis function returned.

Every function takes the DataFrame (or a dict of named DataFrames, to compare runs) that ``workbench.analysis`` or
``workbench.train`` produced and returns a ``matplotlib.figure.Figure`` built without ``pyplot`` (nothing to close,
nothing shown twice), in seaborn's ``whitegrid`` style. One module per subject, ``base`` the shared frame; every
figure is also a name of this package (``wb.plots.loss_curves``). A recipe's stored tables are drawn by
``experiments.experiment_figure``."""

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

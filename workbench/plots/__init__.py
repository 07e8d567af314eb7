"""Figures of analysis results (a DataFrame, or a dict of them by run) for notebooks, widgets and CLI:
pyplot-free, so nothing to close or shown twice. ``title=None`` computes the takeaway, ``""`` draws none."""

from .base import LOG_TICKS, MAX_COLUMNS, PANEL, STYLE, ZERO_LABEL, Runs, new_figure
from .dynamics import (
    contraction_curves,
    contraction_takeaway,
    fixed_point_accuracy,
    fixed_point_readability,
    fixed_point_takeaway,
    lens_by_pass,
    lens_takeaway,
    lyapunov_curves,
    lyapunov_takeaway,
    sensitivity_decay,
)
from .interventions import (
    INTERVENTION_COLORS,
    ablation_distance,
    ablation_takeaway,
    answer_logits,
    swap_flips,
    swap_takeaway,
)
from .mechanisms import gate_takeaway, kv_cache_step, lrt_mechanism, token_steps
from .probes import (
    BOUNDED,
    accuracy_vs_scratch,
    layer0_comparison,
    probe_heatmap,
    probe_profile,
    profile_takeaway,
    regularisation_paths,
    specimen_gates,
)
from .schedules import (
    jacobi_settling,
    knob_symbol,
    regime_losses,
    regime_takeaway,
    schedule_distance,
    schedule_takeaway,
)
from .traces import trace_example, trace_lengths
from .training import (
    CURVE_AXES,
    LOSS_AXES,
    LossFigure,
    difference_intervals,
    ends_title,
    final_marks,
    loss_curves,
    loss_vs_flops,
    pass_losses,
)

__all__ = [
    "BOUNDED", "CURVE_AXES", "INTERVENTION_COLORS", "LOG_TICKS", "LOSS_AXES", "LossFigure", "MAX_COLUMNS", "PANEL",
    "Runs", "STYLE", "ZERO_LABEL", "ablation_distance", "ablation_takeaway", "accuracy_vs_scratch", "answer_logits",
    "contraction_curves", "contraction_takeaway", "difference_intervals", "ends_title", "final_marks",
    "fixed_point_accuracy", "fixed_point_readability", "fixed_point_takeaway", "gate_takeaway", "jacobi_settling",
    "knob_symbol",
    "kv_cache_step", "layer0_comparison", "lens_by_pass", "lens_takeaway", "loss_curves", "loss_vs_flops",
    "lrt_mechanism", "lyapunov_curves", "lyapunov_takeaway", "new_figure", "pass_losses", "probe_heatmap",
    "probe_profile", "profile_takeaway", "regime_losses", "regime_takeaway", "regularisation_paths",
    "schedule_distance", "schedule_takeaway", "sensitivity_decay", "specimen_gates", "swap_flips", "swap_takeaway",
    "token_steps", "trace_example", "trace_lengths",
]

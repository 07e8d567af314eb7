"""ipywidgets front-ends: ``Explorer``s over plain render functions."""

try:
    import ipywidgets  # noqa: F401
except ImportError as error:  # an extra: the package computes without it
    raise ImportError("workbench.widgets needs ipywidgets: pip install 'workbench[lab]'") from error

from .core import Explorer, contraction_explorer, probe_explorer, token_stepper, with_static_twin
from .fbt import pass_window_explorer, probe_compute, regime_explorer
from .interventions import intervention_explorer
from .live import LiveLossPlot
from .lrt import kv_cache_explorer, lrt_run_explorer, schedule_explorer
from .results import recipe_explorer, recipe_record, trace_explorer

__all__ = ["Explorer", "contraction_explorer", "probe_explorer", "token_stepper", "probe_compute", "regime_explorer",
           "recipe_explorer", "recipe_record", "trace_explorer", "intervention_explorer", "kv_cache_explorer",
           "lrt_run_explorer", "schedule_explorer", "LiveLossPlot", "pass_window_explorer", "with_static_twin"]

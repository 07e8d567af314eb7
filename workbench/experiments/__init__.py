"""Experiments: each claim of the two papers as a gated recipe (``python -m workbench reproduce NAME|all``)."""

from .common import (
                     EXACT,
                     FBT_MIX,
                     FBT_MODEL,
                     LRT_MODEL,
                     RUNNING_SUM,
                     SMALL_MODEL,
                     budget_runs,
                     compare,
                     config,
                     matched_steps,
)
from .core import EVAL_SEED, Context, Extension, Finding, Gate, GateResult, Outcome, Recipe, RunSpec, apply_gates
from .figures import experiment_figure
from .recipes import RECIPES
from .results_page import (
                     FINDINGS_BEGIN,
                     findings_markdown,
                     findings_text,
                     shipped_summaries,
                     write_readme_findings,
                     write_results_md,
)
from .results_table import findings_table
from .runner import ensure, list_recipes, reproduce, smoke_scale
from .runs import evaluate_run, reference_metrics, train_run
from .store import EVAL_FILE, FULL_ENV, ROOT_ENV, checkpoints_root, load_results, load_run, run_history, run_metrics

__all__ = ["EVAL_FILE", "EVAL_SEED", "EXACT", "FBT_MIX", "FBT_MODEL", "FULL_ENV", "LRT_MODEL", "RECIPES",
           "ROOT_ENV", "RUNNING_SUM", "SMALL_MODEL", "Context", "Extension", "Gate", "GateResult", "Outcome",
           "Recipe", "RunSpec", "apply_gates", "budget_runs", "checkpoints_root", "compare", "config", "ensure",
           "evaluate_run", "experiment_figure",
           "list_recipes", "load_results", "load_run", "matched_steps", "reference_metrics", "reproduce",
           "run_history", "run_metrics", "shipped_summaries", "smoke_scale", "train_run", "write_results_md",
           "FINDINGS_BEGIN", "Finding", "findings_markdown", "findings_text", "findings_table", "write_readme_findings"]

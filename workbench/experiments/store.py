"""The one checkpoint root of recipes' models and results, for the CLI and notebooks alike."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from .. import schedules
from .._version import __version__
from ..checkpoint import load_checkpoint, load_metrics
from ..model import GPT
from ..train_config import TrainConfig
from .core import RunSpec

ROOT_ENV = "WORKBENCH_CHECKPOINTS"  # overrides the checkpoint root for reproduce, load_run and the notebooks
FULL_ENV = "WORKBENCH_FULL"  # "1": notebooks retrain their recipe instead of loading it
EVAL_FILE = "eval_per_example.csv"


def checkpoints_root() -> Path:
    """``$WORKBENCH_CHECKPOINTS``, else ``checkpoints/`` beside the package, whatever the working directory."""
    env = os.environ.get(ROOT_ENV)
    return Path(env).resolve() if env else Path(__file__).resolve().parents[2] / "checkpoints"


def scratch_root(root: Path) -> Path:
    """Resumable, unshipped run directories: ``runs/`` beside the root."""
    return root.parent / "runs"


def load_run(recipe: str, run: str) -> GPT:
    """A recipe's trained model, in eval mode."""
    return load_checkpoint(checkpoints_root() / recipe / run)


def run_metrics(recipe: str, run: str) -> dict[str, Any]:
    return load_metrics(checkpoints_root() / recipe / run)


def run_history(recipe: str, run: str) -> pd.DataFrame:
    return pd.read_csv(checkpoints_root() / recipe / run / "history.csv")


def load_results(recipe: str, name: str = "results.csv") -> pd.DataFrame:
    """A table a recipe wrote."""
    return pd.read_csv(checkpoints_root() / recipe / name)


def same_trajectory(stored: Any, cfg: TrainConfig) -> bool:
    """Does a stored train config describe ``cfg``'s run? Compared as JSON."""
    if not isinstance(stored, dict):
        return False
    try:
        trained = TrainConfig.from_dict(stored).trajectory_dict()
    except (TypeError, ValueError):
        return False
    return json.loads(json.dumps(trained)) == json.loads(json.dumps(cfg.trajectory_dict()))


def up_to_date(path: Path, spec: RunSpec) -> bool:
    """Was the run at ``path`` trained and evaluated under ``spec`` by this version?"""
    if not (path / "metrics.json").is_file():
        return False
    stored = load_metrics(path)
    try:  # as values: the stored JSON form of the same schedule reads as the same run
        same_eval = schedules.parse(stored.get("eval_schedule", {})) == spec.eval_schedule
    except (TypeError, ValueError):
        return False
    same_setting = json.loads(json.dumps(stored.get("eval_task_params"))) == json.loads(json.dumps(
        spec.eval_task_params))  # as JSON: tuples in a spec are lists once stored
    return (same_trajectory(stored.get("train_config", {}), spec.train) and same_eval and same_setting
            and stored.get("package_version") == __version__ and stored.get("eval_size") == spec.eval_size)

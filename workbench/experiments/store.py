"""Where recipes keep their models and results: one checkpoint root for `reproduce`, `load_run` and notebooks.

The root is ``$WORKBENCH_CHECKPOINTS`` when set, else the ``checkpoints/`` folder of the repository
(beside the package), whatever the working directory: a notebook in ``notebooks/`` and a
``reproduce`` run from anywhere read and write the same place.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd

from ..checkpoint import load_checkpoint, load_metrics
from ..model import GPT

ROOT_ENV = "WORKBENCH_CHECKPOINTS"  # overrides the checkpoint root for reproduce, load_run and the notebooks
FULL_ENV = "WORKBENCH_FULL"  # "1": notebooks retrain their recipe instead of loading it
EVAL_FILE = "eval_per_example.csv"


def checkpoints_root() -> Path:
    """``$WORKBENCH_CHECKPOINTS`` if set, else the ``checkpoints/`` folder beside the package."""
    env = os.environ.get(ROOT_ENV)
    return Path(env).resolve() if env else Path(__file__).resolve().parents[2] / "checkpoints"


def scratch_root(root: Path) -> Path:
    """Trainer run directories (resumable, not shipped): ``runs/`` beside the checkpoint root."""
    return root.parent / "runs"


def load_run(recipe: str, run: str) -> GPT:
    """A recipe's trained model, in eval mode."""
    return load_checkpoint(checkpoints_root() / recipe / run)


def run_metrics(recipe: str, run: str) -> dict[str, Any]:
    return load_metrics(checkpoints_root() / recipe / run)


def run_history(recipe: str, run: str) -> pd.DataFrame:
    return pd.read_csv(checkpoints_root() / recipe / run / "history.csv")


def load_results(recipe: str, name: str = "results.csv") -> pd.DataFrame:
    """A table a recipe wrote (``results.csv``, ``pass_dynamics.csv``, ``traces.csv``, ...)."""
    return pd.read_csv(checkpoints_root() / recipe / name)

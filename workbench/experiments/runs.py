"""One run of a recipe: train or reuse, evaluate, save. Metrics are also recorded in float64: deep exact recurrence
amplifies float32 rounding differences between CPUs."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pandas as pd

from .._version import __version__
from ..checkpoint import load_checkpoint, load_metrics, save_checkpoint
from ..evaluation import per_example_metrics, summarize
from ..files import try_json
from ..model import GPT
from ..run_dir import CONFIG_FILE
from ..train import TrainConfig, train
from .core import EVAL_SEED, RunSpec
from .store import EVAL_FILE, same_trajectory, up_to_date

# steps between resumable saves: a killed reproduce loses at most that much of a run
RESUME_EVERY = 200


def reusable(path: Path, spec: RunSpec) -> bool:
    """A saved run of this spec, with its recorded evaluation."""
    return up_to_date(path, spec) and (path / EVAL_FILE).is_file()


def evaluate_run(model: GPT, spec: RunSpec) -> pd.DataFrame:
    """Per-example metrics on the run's fixed held-out batch."""
    return per_example_metrics(model, spec.eval_batch(), spec.eval_schedule)


def reference_metrics(model: GPT, spec: RunSpec) -> dict[str, float]:
    """The recorded evaluation in float64 on a copy: the number tests pin."""
    double = copy.deepcopy(model).to("cpu").double()
    return summarize(evaluate_run(double, spec), getattr(spec.eval_task(), "bytes_per_token", None))


def spec_of(path: Path) -> RunSpec:
    """The ``RunSpec`` of a saved run, from its metrics.json."""
    m = load_metrics(path)
    return RunSpec(m["run"], TrainConfig.from_dict(m["train_config"]), m["eval_schedule"], m["eval_size"],
                   m.get("eval_task_params"))


def _evaluation(model: GPT, spec: RunSpec, per_example: pd.DataFrame) -> dict[str, Any]:
    """The evaluation part of a run's metrics."""
    return {"eval": summarize(per_example, getattr(spec.eval_task(), "bytes_per_token", None)),
            "eval_float64": reference_metrics(model, spec), "eval_schedule": spec.eval_schedule.to_dict(),
            "eval_size": spec.eval_size, "eval_seed": EVAL_SEED,
            **({} if spec.eval_task_params is None else {"eval_task_params": spec.eval_task_params})}


def _copy_shared(spec: RunSpec, path: Path) -> bool:
    """Copy an up-to-date run of the same training from another recipe, re-evaluated if need be."""
    if path.exists():
        return False
    for other in sorted(path.parent.parent.glob(f"*/{spec.name}")):
        if other.parent == path.parent or not (other / EVAL_FILE).is_file():
            continue
        if up_to_date(other, spec):
            shutil.copytree(other, path)
            return True
        stored = load_metrics(other)
        if same_trajectory(stored.get("train_config", {}), spec.train) and stored.get("package_version") \
                == __version__:
            model = load_checkpoint(other)
            per_example = evaluate_run(model, spec)
            metrics = {**stored, **_evaluation(model, spec, per_example), "evaluated_by": path.parent.name}
            extra = {"recipe": stored["recipe"], "run": spec.name, "seed": spec.train.seed}
            save_checkpoint(model, path, metrics=metrics, extra=extra)
            shutil.copyfile(other / "history.csv", path / "history.csv")
            per_example.to_csv(path / EVAL_FILE, index=False)
            return True
    return False


def train_run(spec: RunSpec, path: Path, scratch: Path, force: bool = False) -> tuple[GPT, pd.DataFrame]:
    """Train (or reuse) one run and save it."""
    if not force and (reusable(path, spec) or _copy_shared(spec, path)):  # a copy brings its evaluation
        return load_checkpoint(path), pd.read_csv(path / EVAL_FILE)
    run_dir = scratch / path.parent.name / path.name
    cfg = spec.train.replace(out_dir=str(run_dir), checkpoint_every=RESUME_EVERY)
    # the runner's own scratch, of a run this spec no longer describes (the trainer refuses to resume it)
    if run_dir.exists() and (force or not same_trajectory(try_json(run_dir / CONFIG_FILE), cfg)):
        shutil.rmtree(run_dir)
    cfg = cfg.replace(resume=(run_dir / "checkpoint").is_dir())
    result = train(cfg)  # its metrics' cpu_seconds: what the run cost a core, every resumed part counted
    per_example = evaluate_run(result.model, spec)
    metrics = {**_evaluation(result.model, spec, per_example), "train": result.metrics,
               "train_config": spec.train.trajectory_dict(), "package_version": __version__,
               "recipe": path.parent.name, "run": spec.name, "seed": spec.train.seed}
    # config.json records what the run is for, so the checkpoint alone says it
    save_checkpoint(result.model, path, metrics=metrics, extra={
        "recipe": path.parent.name, "run": spec.name, "seed": spec.train.seed, "task": spec.train.task,
        "task_params": dict(spec.train.task_params)})
    shutil.copyfile(run_dir / "history.csv", path / "history.csv")
    per_example.to_csv(path / EVAL_FILE, index=False)
    return result.model, per_example

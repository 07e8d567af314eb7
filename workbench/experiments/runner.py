"""Running a recipe: train what is stale, evaluate, analyse, apply the gates, write summary.json.

Each run's recorded metric is measured twice: in float32 (what the model is used in) and in
float64 (``eval_float64``). The float64 number is the one tests re-check: an evaluation under the
exact recurrence, run far past the depth a model was trained at, amplifies float32 rounding
differences between CPUs (a different BLAS kernel, another thread count) into visible changes of
the loss, while in float64 the same amplification stays far below any tolerance we use.
"""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from .. import tasks
from .._version import __version__
from ..checkpoint import load_checkpoint, load_config, load_metrics, save_checkpoint, write_json_atomic
from ..evaluation import per_example_metrics, summarize
from ..model import GPT
from ..run_dir import CONFIG_FILE
from ..train import TrainConfig, train
from .common import step_flops
from .core import EVAL_SEED, Context, Outcome, RunSpec, apply_gates
from .recipes import RECIPES
from .store import EVAL_FILE, FULL_ENV, checkpoints_root, same_trajectory, scratch_root, up_to_date


def _reusable(path: Path, spec: RunSpec) -> bool:
    """A saved run of this very spec, with its recorded evaluation."""
    return up_to_date(path, spec) and (path / EVAL_FILE).is_file()


def evaluate_run(model: GPT, spec: RunSpec) -> pd.DataFrame:
    """The recorded evaluation of a run: per-example metrics on its fixed held-out batch."""
    return per_example_metrics(model, spec.eval_batch(), spec.eval_schedule)


def reference_metrics(model: GPT, spec: RunSpec) -> dict[str, float]:
    """The recorded evaluation recomputed in float64 on a copy: the well-conditioned number tests pin."""
    double = copy.deepcopy(model).to("cpu").double()
    task = tasks.get(spec.train.task, **spec.train.task_params)
    return summarize(evaluate_run(double, spec), getattr(task, "bytes_per_token", 1.0))


def spec_of(path: Path) -> RunSpec:
    """The ``RunSpec`` a saved run was trained and evaluated under, from its metrics.json."""
    m = load_metrics(path)
    return RunSpec(m["run"], TrainConfig.from_dict(m["train_config"]), m["eval_schedule"], m["eval_size"])


def record_reference(path: Path) -> dict[str, float]:
    """Add (or refresh) ``eval_float64`` in a saved run's metrics, e.g. for runs saved before it existed.

    The run is saved again as a new version (its manifest then lists the new metrics), keeping its
    config extras and the history and evaluation files that sit beside the checkpoint.
    """
    path = Path(path)
    model, metrics = load_checkpoint(path), load_metrics(path)
    metrics["eval_float64"] = reference_metrics(model, spec_of(path))
    header = load_config(path)[1]
    extra = {k: v for k, v in header.items() if k not in ("format", "package_version", "model")}
    beside = {name: (path / name).read_bytes() for name in ("history.csv", EVAL_FILE) if (path / name).is_file()}
    save_checkpoint(model, path, metrics=metrics, extra=extra)
    for name, data in beside.items():
        (path / name).write_bytes(data)
    return metrics["eval_float64"]


def _evaluation(model: GPT, spec: RunSpec, per_example: pd.DataFrame) -> dict[str, Any]:
    """The evaluation part of a run's metrics: the summary of its per-example evaluation, the float64
    reference, and under which schedule, on how many examples, from which seed."""
    task = tasks.get(spec.train.task, **spec.train.task_params)
    return {"eval": summarize(per_example, getattr(task, "bytes_per_token", 1.0)),
            "eval_float64": reference_metrics(model, spec), "eval_schedule": spec.eval_schedule.to_dict(),
            "eval_size": spec.eval_size, "eval_seed": EVAL_SEED}


def _copy_shared(spec: RunSpec, path: Path) -> bool:
    """Copy an up-to-date run of the same name and training that another recipe under the same root trained:
    an arm two recipes compare (LRT interleaved on text in ``lrt_vs_baseline`` and ``schedules``) costs
    its compute once. Its metrics keep the recipe that trained it; evaluated under another schedule there, the
    copy is evaluated again under this spec's (and its metrics say so)."""
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
    """Train (or reuse, when up to date, here or in another recipe) one run; save its slim checkpoint,
    metrics, history and evaluation."""
    if not force and (_reusable(path, spec) or _copy_shared(spec, path)):  # a copy brings its evaluation
        return load_checkpoint(path), pd.read_csv(path / EVAL_FILE)
    run_dir = scratch / path.parent.name / path.name
    cfg = spec.train.replace(out_dir=str(run_dir))
    # the runner's own scratch, of a run this spec no longer describes (the trainer refuses to resume it)
    if run_dir.exists() and (force or not same_trajectory(_read_json_or_none(run_dir / CONFIG_FILE), cfg)):
        shutil.rmtree(run_dir)
    cfg = cfg.replace(resume=(run_dir / "checkpoint").is_dir())
    cpu = time.process_time()  # this process's CPU time: what the run costs a core, however busy the machine
    result = train(cfg)
    cpu = time.process_time() - cpu
    per_example = evaluate_run(result.model, spec)
    metrics = {**_evaluation(result.model, spec, per_example), "train": {**result.metrics, "cpu_seconds": cpu},
               "train_config": spec.train.trajectory_dict(), "package_version": __version__,
               "recipe": path.parent.name, "run": spec.name, "seed": spec.train.seed}
    save_checkpoint(result.model, path, metrics=metrics,
                    extra={"recipe": path.parent.name, "run": spec.name, "seed": spec.train.seed})
    shutil.copyfile(run_dir / "history.csv", path / "history.csv")
    per_example.to_csv(path / EVAL_FILE, index=False)
    return result.model, per_example


def _read_json_or_none(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _train_in_worker(spec: RunSpec, path: Path, scratch: Path, force: bool) -> str:
    """One stale run trained in a worker process of one torch thread (``reproduce(jobs=...)``); the parent
    loads what it saved."""
    import torch

    torch.set_num_threads(1)
    train_run(spec, path, scratch, force)
    return spec.name


def _training_flops(spec: RunSpec) -> float:
    """A run's training FLOPs by the trainer's own accounting, at its task's longest length (an estimate
    for ordering runs, not a budget)."""
    return step_flops(spec.train) * spec.train.steps


def _train_parallel(stale: list[RunSpec], out: Path, scratch: Path, force: bool, jobs: int) -> None:
    """Train a recipe's stale runs ``jobs`` at a time, one torch thread each: small models use
    one core well, so two runs side by side on two cores finish in about half the wall time of
    running them one after the other at two threads."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    if not stale:
        return
    stale = sorted(stale, key=_training_flops, reverse=True)  # longest first: the last run to start is a short one
    with ProcessPoolExecutor(min(jobs, len(stale)), mp_context=multiprocessing.get_context("spawn")) as pool:
        for done in tqdm([pool.submit(_train_in_worker, s, out / s.name, scratch, force) for s in stale],
                         desc="parallel runs", leave=False):
            done.result()


def makespan(seconds: list[float], workers: int) -> float:
    """Wall time of jobs of these durations on ``workers`` workers, longest first to the least loaded one (the
    order ``reproduce(jobs=...)`` submits them): on a shared machine, the wall a quiet one would take."""
    if workers < 1:
        raise ValueError(f"workers={workers!r} is invalid: must be >= 1")
    loads = [0.0] * workers
    for s in sorted(seconds, reverse=True):
        loads[loads.index(min(loads))] += s
    return max(loads)


def _measured_or_null(value: Any) -> Any:
    """``value`` with every non-finite float (a quantity a run could not measure, e.g. a curve too short to
    judge at smoke scale) as None: JSON has no NaN, and null reads as "not measured", which never passes a gate."""
    if isinstance(value, dict):
        return {k: _measured_or_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_measured_or_null(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _check_name(name: str) -> None:
    if name not in RECIPES:
        raise ValueError(f"recipe {name!r} is unknown: choose from {sorted(RECIPES)}")


def reproduce(name: str, root: str | Path | None = None, scale: float = 1.0, force: bool = False,
              scratch: str | Path | None = None, jobs: int = 1) -> Outcome:
    """Run one recipe: train what is stale, analyse, apply its gates, write results.csv/.png, summary.json.

    ``root`` defaults to ``checkpoints_root()`` (where ``load_run`` and the notebooks read); ``scratch``
    to ``runs/`` beside it. ``jobs`` > 1 trains stale runs that many at a time in worker processes.
    """
    _check_name(name)
    if not (isinstance(scale, (int, float)) and scale > 0):
        raise ValueError(f"scale={scale!r} is invalid: must be > 0")
    if not (isinstance(jobs, int) and jobs >= 1):
        raise ValueError(f"jobs={jobs!r} is invalid: must be an integer >= 1")
    recipe = RECIPES[name]
    root = checkpoints_root() if root is None else Path(root)
    scratch = scratch_root(root) if scratch is None else Path(scratch)
    out = root / name
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    runs = {spec.name: spec for spec in recipe.build(scale)}
    stale = [spec for spec in runs.values() if force or not _reusable(out / spec.name, spec)]
    models, per_example = {}, {}
    if jobs > 1:
        _train_parallel(stale, out, scratch, force, jobs)
        force = False  # the workers retrained what force asked for
    for n, spec in tqdm(runs.items(), desc=name, leave=False):
        models[n], per_example[n] = train_run(spec, out / n, scratch, force)
    trained = time.perf_counter() - started
    outcome = recipe.analyze(Context(recipe, runs, models, per_example, out, scale))
    gates, outcome.verdict = apply_gates(recipe, outcome.gate_values, outcome.verdict)
    outcome.table.to_csv(out / "results.csv", index=False)
    outcome.figure.savefig(out / "results.png", dpi=110, bbox_inches="tight")
    train_seconds = sum(load_metrics(out / n)["train"]["seconds"] for n in runs)
    # the clocks of the invocation that trained (a rerun that only analyses keeps the last one's): its wall
    # clock and, for one-thread workers, what the same runs need on `jobs` quiet cores, from their CPU times
    cpu = [load_metrics(out / s.name)["train"].get("cpu_seconds") for s in stale]
    wall = ({"jobs": jobs, "train_wall_minutes": trained / 60, "trained_runs": sorted(s.name for s in stale),
             "quiet_wall_minutes": makespan(cpu, jobs) / 60 if jobs > 1 and None not in cpu else None}
            if stale else {k: (_read_json_or_none(out / "summary.json") or {}).get(k)
                           for k in ("jobs", "train_wall_minutes", "trained_runs", "quiet_wall_minutes")})
    write_json_atomic(out / "summary.json", _measured_or_null({
        "recipe": name, "kind": recipe.kind, "claim": recipe.claim, "setting": recipe.setting, "rule": recipe.rule,
        "chance": outcome.chance or recipe.chance, "number": outcome.number, "verdict": outcome.verdict,
        "gates": [{"name": g.gate.name, "quantity": g.gate.quantity, "op": g.gate.op, "threshold": g.gate.threshold,
                   "value": g.value, "passed": g.passed} for g in gates],
        "seeds": sorted({spec.train.seed for spec in runs.values()}), "scale": scale,
        "train_minutes": train_seconds / 60, **wall,
        "seconds": time.perf_counter() - started, "runs": sorted(runs),
        **outcome.extra}))
    return outcome


def ensure(recipe: str, scale: float | None = None) -> dict[str, Any]:
    """Make a recipe's results available and return its summary.

    With ``WORKBENCH_FULL=1`` the recipe is (re)trained at ``scale`` (default 1); otherwise its
    checkpoints are loaded as they are, and a missing recipe is an error that says how to make it.
    """
    _check_name(recipe)
    root = checkpoints_root()
    if os.environ.get(FULL_ENV) == "1":
        reproduce(recipe, root=root, scale=1.0 if scale is None else scale)
    path = root / recipe / "summary.json"
    if not path.is_file():
        raise FileNotFoundError(f"no results for recipe {recipe!r} under {root}: run "
                                f"'python -m workbench reproduce {recipe}' (or set {FULL_ENV}=1)")
    return json.loads(path.read_text())


def smoke_scale() -> float:
    """The scale the test suite runs every recipe at: a few steps each, small evaluations."""
    return 0.01


def list_recipes() -> pd.DataFrame:
    """Each recipe's claim, gates and decision rule, as stated before anything runs. ``runs`` counts the
    models a verdict rests on: a recipe's own, plus those of the recipes it ``reads`` (analyses only)."""
    return pd.DataFrame([{"recipe": r.name, "kind": r.kind, "claim": r.claim, "setting": r.setting,
                          "gates": "; ".join(g.describe() for g in r.gates), "rule": r.rule, "chance": r.chance,
                          "runs": len(r.build(1.0)) + sum(len(RECIPES[o].build(1.0)) for o in r.reads)}
                         for r in RECIPES.values()])

"""Running a recipe: train what is stale, analyse, apply the gates, write summary.json."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from ..checkpoint import load_metrics
from ..files import try_json, write_json_atomic
from ..validation import fail
from .core import Context, Outcome, apply_gates
from .pool import makespan, train_parallel
from .recipes import RECIPES
from .runs import reusable, train_run
from .store import FULL_ENV, checkpoints_root, scratch_root

TRAIN_CLOCK = "train_clock.json"  # the clocks of the last invocation that trained something


def _measured_or_null(value: Any) -> Any:
    """Non-finite floats as None: null reads "not measured", which never passes a gate."""
    if isinstance(value, dict):
        return {k: _measured_or_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_measured_or_null(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def check_recipe(name: str) -> None:
    """Refuse a name ``RECIPES`` does not hold."""
    if name not in RECIPES:
        raise ValueError(f"recipe {name!r} is unknown: choose from {sorted(RECIPES)}")


def reproduce(name: str, root: str | Path | None = None, scale: float = 1.0, force: bool = False,
              scratch: str | Path | None = None, jobs: int = 1) -> Outcome:
    """Run one recipe (see the module)."""
    check_recipe(name)
    if not (isinstance(scale, (int, float)) and scale > 0):
        fail("scale", scale, "must be > 0")
    if not (isinstance(jobs, int) and jobs >= 1):
        fail("jobs", jobs, "must be an integer >= 1")
    recipe = RECIPES[name]
    root = checkpoints_root() if root is None else Path(root)
    scratch = scratch_root(root) if scratch is None else Path(scratch)
    out = root / name
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    runs = {spec.name: spec for spec in recipe.build(scale)}
    stale = [spec for spec in runs.values() if force or not reusable(out / spec.name, spec)]
    models, per_example = {}, {}
    if jobs > 1:
        train_parallel(stale, out, scratch, force, jobs)
        force = False  # the workers retrained what force asked for
    for n, spec in tqdm(runs.items(), desc=name, leave=False):
        models[n], per_example[n] = train_run(spec, out / n, scratch, force)
    trained = time.perf_counter() - started
    # written before the analysis: a rerun after a stop there keeps the training clocks
    if stale:
        cpu = [load_metrics(out / s.name)["train"].get("cpu_seconds") for s in stale]
        write_json_atomic(out / TRAIN_CLOCK, {
            "jobs": jobs, "train_wall_minutes": trained / 60, "trained_runs": sorted(s.name for s in stale),
            "quiet_wall_minutes": makespan(cpu, jobs) / 60 if jobs > 1 and None not in cpu else None})
    outcome = recipe.analyze(Context(recipe, runs, models, per_example, out, scale, jobs))
    gates, outcome.verdict = apply_gates(recipe, outcome.gate_values, outcome.verdict)
    outcome.table.to_csv(out / "results.csv", index=False)
    outcome.draw(outcome.verdict).savefig(out / "results.png", dpi=110, bbox_inches="tight")
    train_seconds = sum(load_metrics(out / n)["train"]["seconds"] for n in runs)
    clock = try_json(out / TRAIN_CLOCK) or try_json(out / "summary.json") or {}  # older outputs: the last summary's
    wall = {k: clock.get(k) for k in ("jobs", "train_wall_minutes", "trained_runs", "quiet_wall_minutes")}
    write_json_atomic(out / "summary.json", _measured_or_null({
        "recipe": name, "kind": recipe.kind, "claim": recipe.claim, "setting": recipe.setting, "rule": recipe.rule,
        "chance": outcome.chance or recipe.chance, "number": outcome.number, "verdict": outcome.verdict,
        "gates": [{"name": g.gate.name, "quantity": g.gate.quantity, "op": g.gate.op, "threshold": g.gate.threshold,
                   "value": g.value, "passed": g.passed} for g in gates],
        "seeds": sorted({spec.train.seed for spec in runs.values()}), "scale": scale,
        "train_minutes": train_seconds / 60, **wall,
        "seconds": time.perf_counter() - started, "runs": sorted(runs),
        **({"extensions": [dataclasses.asdict(e) for e in outcome.extensions]} if outcome.extensions else {}),
        **outcome.extra}))
    return outcome


def ensure(recipe: str) -> dict[str, Any]:
    """A recipe's summary, retrained first under ``WORKBENCH_FULL=1``."""
    check_recipe(recipe)
    root = checkpoints_root()
    if os.environ.get(FULL_ENV) == "1":
        reproduce(recipe, root=root)
    path = root / recipe / "summary.json"
    if not path.is_file():
        raise FileNotFoundError(f"no results for recipe {recipe!r} under {root}: run "
                                f"'python -m workbench reproduce {recipe}' (or set {FULL_ENV}=1)")
    return json.loads(path.read_text())


def smoke_scale() -> float:
    """The scale the test suite runs every recipe at."""
    return 0.001


def list_recipes() -> pd.DataFrame:
    """Each recipe's claim, gates and rule; ``runs`` counts the recipes it ``reads`` too."""
    return pd.DataFrame([{"recipe": r.name, "kind": r.kind, "claim": r.claim, "setting": r.setting,
                          "gates": "; ".join(g.describe() for g in r.gates), "rule": r.rule, "chance": r.chance,
                          "runs": len(r.build(1.0)) + sum(len(RECIPES[o].build(1.0)) for o in r.reads)}
                         for r in RECIPES.values()])

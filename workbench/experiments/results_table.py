"""Every recipe's results in one place, and the training compute each run really spent.

It reads what the recipes wrote (their names, the checkpoint root), so it lives with them.

``workbench.experiments`` writes, per recipe, ``summary.json`` (claim, setting, our number,
verdict), ``results.csv`` and sometimes a second table (``pass_dynamics.csv``, ``traces.csv``);
per run, ``metrics.json`` with the trainer's own FLOP count. These functions read them back as
DataFrames, so a notebook can show the whole results page and check the claim behind it — that
runs compared "at matched compute" spent the same training FLOPs, up to one optimiser step.

- ``load_summaries()``: every recipe's ``summary.json`` through ``experiments.ensure``, and the
  recipes that have no results yet (named, not raised: a new recipe lands before its first run);
- ``summary_table(summaries)``: one row per recipe, the content of ``RESULTS.md``'s head table;
- ``findings_table(summaries)``: "What we found": per recipe the paper's claim with its number, ours, the
  verdict and one plain sentence, each recipe's own ``finding`` computed from what it wrote;
- ``gates_table(summaries)``: one row per gate of every recipe: what it measures, the value, the
  threshold and whether it passed (a failed gate makes the verdict *not tested*);
- ``recipe_tables(recipe)``: the tables a recipe wrote, by name (``results``, ``pass_dynamics``, ...);
- ``per_example(recipe, run)``: a run's evaluation per held-out example (what verdicts resample);
- ``run_compute(recipe)``: per run, schedule, steps, recorded FLOPs, the passes they amount to, and
  one step's FLOPs recomputed with ``experiments.common.step_flops``;
- ``compute_matching(compute, by)``: per group of runs meant to share a budget, the FLOP spread
  against the largest single step;
- ``specimens_table(summaries)``: one row per shipped run: its task (which a checkpoint's ``config.json``
  does not hold), model shape, schedule, steps, seed, its own held-out number and, where its recipe gates
  each specimen, that gate's value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .. import schedules, tasks
from ..checkpoint import load_config, load_metrics
from ..model import build_model
from ..train_config import TrainConfig
from .common import step_flops
from .core import default_finding, short_verdict
from .recipes import RECIPES
from .runner import ensure
from .store import EVAL_FILE, checkpoints_root, load_results, run_metrics

SUMMARY_COLUMNS = ["recipe", "kind", "claim", "setting", "number", "verdict", "gates_passed", "seeds", "scale"]
REQUIRED_FIELDS = ("claim", "setting", "number", "verdict", "scale")  # every summary.json has these
FINDING_COLUMNS = ["recipe", "kind", "paper", "ours", "verdict", "finding"]
GATE_COLUMNS = ["recipe", "gate", "quantity", "value", "op", "threshold", "passed"]
EXTRA_TABLES = ("pass_dynamics", "traces", "distances", "bars")  # tables some recipes write beside results.csv
SPECIMEN_COLUMNS = ["recipe", "run", "task", "task_params", "mechanism", "shape", "params", "schedule", "steps", "seed",
                    "measure", "held_out", "held_out_schedule", "gate", "gate_value", "gate_passed"]
COMPUTE_COLUMNS = ["run", "task", "seed", "schedule", "steps", "flops", "pass_flops", "mean_passes", "flops_per_step",
                   "expected_flops"]


def _measured(value: float | None) -> float:
    """A stored gate value; null (not measured) as NaN."""
    return float("nan") if value is None else float(value)


def _check_recipe(recipe: str) -> None:
    if recipe not in RECIPES:
        raise ValueError(f"recipe={recipe!r} is unknown: choose from {sorted(RECIPES)}")


def _check_summaries(summaries: Mapping[str, Mapping[str, Any]]) -> None:
    if not summaries:
        raise ValueError("summaries is empty: give recipe name -> summary.json contents")
    for name, summary in summaries.items():
        missing = [c for c in REQUIRED_FIELDS if c not in summary]
        if missing:
            raise ValueError(f"summaries[{name!r}] lacks {missing}: pass what experiments.ensure returns")


def load_summaries(recipes: Sequence[str] | None = None) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """``({recipe: summary.json}, [recipes with no results yet])`` for ``recipes`` (default: all).

    Each goes through ``experiments.ensure`` (so ``WORKBENCH_FULL=1`` retrains it first); one whose
    results do not exist yet is listed instead of stopping the page.
    """
    summaries, missing = {}, []
    for recipe in RECIPES if recipes is None else recipes:
        _check_recipe(recipe)
        try:
            summaries[recipe] = ensure(recipe)
        except FileNotFoundError:
            missing.append(recipe)
    return summaries, missing


def summary_table(summaries: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """One row per recipe from its ``summary.json`` (what ``experiments.ensure`` returns): the results page.

    ``gates_passed`` reads "k / n" (empty for a summary that records no gates), ``seeds`` counts the
    training seeds per arm (NaN when not recorded), ``kind`` says whether the recipe tests a paper's
    claim or is exploratory. A verdict that starts with "not tested" means a gate failed: read the
    gates (``gates_table``), not the number.
    """
    _check_summaries(summaries)
    rows = []
    for name, summary in summaries.items():
        gates = summary.get("gates", [])
        rows.append({"recipe": name, "kind": summary.get("kind", ""),
                     **{c: summary[c] for c in REQUIRED_FIELDS},
                     "gates_passed": f"{sum(bool(g['passed']) for g in gates)} / {len(gates)}" if gates else "",
                     "seeds": len(summary["seeds"]) if "seeds" in summary else float("nan")})
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def findings_table(summaries: Mapping[str, Mapping[str, Any]], root: str | Path | None = None) -> pd.DataFrame:
    """What we found, one row per recipe: ``paper`` (the claim in a few words with the paper's number; empty for
    our own questions), ``ours`` (our headline number), ``verdict`` and ``finding`` (one plain sentence).

    ``verdict`` reads "not tested" when every part of it is, and the finding then opens with the competence
    check that failed. A recipe that applies its rule beyond the paper's claim adds one row per extension
    (``kind = "extension"``) under its own: never its verdict. ``ours`` and ``finding`` are computed by the
    recipe's ``finding`` from its ``summary.json`` and ``results.csv`` (under ``root``, default the checkpoint
    root: where the summaries were read), so they change when a recipe is retrained, never by hand.
    """
    root = checkpoints_root() if root is None else Path(root)
    _check_summaries(summaries)
    rows = []
    for name, summary in summaries.items():
        _check_recipe(name)
        recipe = RECIPES[name]
        said = (recipe.finding or default_finding)(summary, pd.read_csv(root / name / "results.csv"))
        rows.append({"recipe": name, "kind": summary.get("kind", recipe.kind), "paper": recipe.paper,
                     "ours": said.ours, "verdict": short_verdict(summary["verdict"]), "finding": said.sentence.strip()})
        rows += [{"recipe": name, "kind": "extension", "paper": f"beyond the claim: {e['name']}", "ours": e["number"],
                  "verdict": short_verdict(e["verdict"]),
                  "finding": f"The rule applied beyond the paper's claim, to {e['name']}: {e['verdict']}."}
                 for e in summary.get("extensions", [])]
    return pd.DataFrame(rows, columns=FINDING_COLUMNS)


def gates_table(summaries: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """One row per gate of every recipe: the competence checks its models had to pass before a verdict.

    ``value`` is what the recipe measured, ``op`` and ``threshold`` what it needed; a recipe with a
    failed gate reports ``not tested`` and no other verdict. Recipes that record no gates add no rows.
    """
    _check_summaries(summaries)
    rows = [{"recipe": name, "gate": g["name"], "quantity": g["quantity"], "value": _measured(g["value"]),
             "op": g["op"], "threshold": float(g["threshold"]), "passed": bool(g["passed"])}
            for name, summary in summaries.items() for g in summary.get("gates", [])]
    return pd.DataFrame(rows, columns=GATE_COLUMNS)


def recipe_tables(recipe: str) -> dict[str, pd.DataFrame]:
    """The tables a recipe wrote, by name: ``results`` always, ``pass_dynamics``/``traces`` where present."""
    _check_recipe(recipe)
    tables = {"results": load_results(recipe)}
    for name in EXTRA_TABLES:
        if (checkpoints_root() / recipe / f"{name}.csv").is_file():
            tables[name] = load_results(recipe, f"{name}.csv")
    return tables


def per_example(recipe: str, run: str) -> pd.DataFrame:
    """The per-example evaluation a run's recorded metric and the recipe's paired intervals come from."""
    _check_recipe(recipe)
    path = checkpoints_root() / recipe / run / EVAL_FILE
    if not path.is_file():
        raise ValueError(f"run={run!r} of recipe {recipe!r} has no {EVAL_FILE} under {checkpoints_root()}")
    return pd.read_csv(path)


def _step_flops(cfg: TrainConfig) -> tuple[float, float]:
    """One optimiser step of ``cfg`` under the trainer's accounting: (one plain pass, the configured
    schedule); the second is NaN when the work varies per step (a pass mix, or plain steps before
    ``feedback_start``)."""
    plain = step_flops(cfg, schedules.Single())
    if "pass_mix" in cfg.schedule.to_dict() or cfg.feedback_start > 0:
        return plain, float("nan")
    return plain, step_flops(cfg)


def run_compute(recipe: str, runs: Sequence[str] | None = None) -> pd.DataFrame:
    """Per run: schedule, steps, recorded training FLOPs, and what they amount to in passes.

    ``flops`` and ``steps`` are what the trainer recorded (``metrics.json``: ``train``);
    ``pass_flops`` is one plain forward + backward of a batch and ``mean_passes = flops / (steps *
    pass_flops)`` the full passes a step cost on average (``Schedule.pass_equivalents`` for a fixed
    schedule; between 1 and the most passes for a pass mix). ``flops_per_step`` is one step of the
    configured schedule recomputed with ``common.step_flops`` (NaN where the work varies
    per step), so ``expected_flops = steps * flops_per_step`` checks the recorded count.
    ``runs``: default every run directory of the recipe.
    """
    _check_recipe(recipe)
    if runs is None:
        runs = sorted(p.parent.name for p in (checkpoints_root() / recipe).glob("*/metrics.json"))
    if not runs:
        raise ValueError(f"runs is empty: recipe {recipe!r} has no trained runs under {checkpoints_root()}")
    rows = []
    for run in runs:
        metrics = run_metrics(recipe, run)
        cfg = TrainConfig.from_dict(metrics["train_config"])
        plain, per_step = _step_flops(cfg)
        steps, flops = int(metrics["train"]["step"]), float(metrics["train"]["flops"])
        rows.append({"run": run, "task": cfg.task, "seed": cfg.seed, "schedule": cfg.schedule.to_dict()["schedule"],
                     "steps": steps,
                     "flops": flops, "pass_flops": plain, "mean_passes": flops / (steps * plain),
                     "flops_per_step": per_step, "expected_flops": steps * per_step})
    return pd.DataFrame(rows, columns=COMPUTE_COLUMNS)


def compute_matching(compute: pd.DataFrame, by: str | Sequence[str] = "task") -> pd.DataFrame:
    """Per group of runs that share a budget: the spread of their training FLOPs against one step.

    Step counts are whole numbers, so runs "at matched compute" can differ by up to one optimiser
    step; ``matched`` is ``spread <= largest_step`` (the largest mean step, ``flops / steps``, of the
    group). ``ratio`` is the most over the least FLOPs spent.
    """
    keys = [by] if isinstance(by, str) else list(by)
    missing = sorted((set(keys) | {"run", "flops", "steps"}) - set(compute.columns))
    if missing:
        raise ValueError(f"compute lacks the column(s) {missing}: pass run_compute's output (by={by!r})")
    rows = []
    for key, group in compute.groupby(keys, sort=False):
        flops = group["flops"].to_numpy(dtype=float)
        largest_step = float(np.max(flops / group["steps"].to_numpy(dtype=float)))
        spread = float(flops.max() - flops.min())
        rows.append({**dict(zip(keys, key if isinstance(key, tuple) else (key,))), "runs": len(group),
                     "flops_min": float(flops.min()), "flops_max": float(flops.max()), "spread": spread,
                     "largest_step": largest_step, "ratio": float(flops.max() / flops.min()),
                     "matched": spread <= largest_step})
    return pd.DataFrame(rows)


def _schedule(cfg: TrainConfig) -> str:
    """A run's training schedule in a few words: its name, the knob it was given, a pass mix as its draws, and a
    single-pass start (``feedback_start``)."""
    value, spec = cfg.schedule, cfg.schedule.to_dict()
    symbol = "" if spec["schedule"] == "multipass" else f"{value.symbol}="
    knob = "" if value.knob is None else f" {symbol}{value.knob}"
    if "pass_mix" in spec:
        knob = " mix " + "/".join(f"{k}:{p:g}" for k, p in spec["pass_mix"].items())
    start = f" after {cfg.feedback_start:.0%} single" if cfg.feedback_start > 0 else ""
    return spec["schedule"] + knob + start


def specimens_table(summaries: Mapping[str, Mapping[str, Any]], root: str | Path | None = None) -> pd.DataFrame:
    """One row per shipped run (a *specimen*: ``load_run(recipe, run)`` loads it) of every recipe in ``summaries``.

    ``task`` and ``task_params`` are what the run trained on, from its ``metrics.json`` (the checkpoint's
    ``config.json`` holds the model, not the task); ``shape`` is layers x width and ``params`` the parameter
    count of the model in ``config.json``; ``schedule`` its training schedule; ``steps`` the optimiser steps it
    trained (a FLOP budget may stop it before ``TrainConfig.steps``). ``held_out`` is the run's own held-out
    ``measure`` as its recipe evaluated it (bits/byte on text, answer accuracy on a task: the number that says
    whether it learned), under ``held_out_schedule``. ``gate``, ``gate_value`` and ``gate_passed``: the run's own
    competence gate where its recipe gates each specimen (``summary["specimens"]``, e.g. ``layer0_probes``),
    else None (its recipe's gates hold over all its runs). A recipe that trains none of its own (it analyses the
    runs of the recipes it ``reads``) adds no rows. ``root``: default the checkpoint root.
    """
    root = checkpoints_root() if root is None else Path(root)
    _check_summaries(summaries)
    rows = []
    for name, summary in summaries.items():
        gated = {r["run"]: r for r in summary.get("specimens", []) if r.get("scratch_updates", 0) == 0}
        for run in summary.get("runs", []):
            model, _ = load_config(root / name / run)
            metrics = load_metrics(root / name / run)
            cfg = TrainConfig.from_dict(metrics["train_config"])
            text = getattr(tasks.REGISTRY[cfg.task], "bytes_per_token", None) is not None
            measure = "bits/byte" if text else "answer accuracy"
            gate = gated.get(run)
            rows.append({"recipe": name, "run": run, "task": cfg.task,
                         "task_params": ", ".join(f"{k}={v}" for k, v in sorted(cfg.task_params.items())),
                         "mechanism": model.mechanism, "shape": f"{model.n_layer}x{model.n_embd}",
                         "params": build_model(model, device="meta").num_params(),
                         "schedule": _schedule(cfg), "steps": int(metrics["train"]["step"]), "seed": cfg.seed,
                         "measure": measure, "held_out": metrics["eval"]["bpb" if text else "answer_accuracy"],
                         "held_out_schedule": metrics["eval_schedule"]["schedule"],
                         "gate": None if gate is None else f"{gate['gate']} ({gate['gate_condition']})",
                         "gate_value": None if gate is None else gate["gate_value"],
                         "gate_passed": None if gate is None else bool(gate["gated"])})
    return pd.DataFrame(rows, columns=SPECIMEN_COLUMNS)

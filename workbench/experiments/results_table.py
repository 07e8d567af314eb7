"""Every recipe's results as DataFrames, and each run's real training compute (were "matched" runs matched?)."""

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
from .runner import check_recipe, ensure
from .store import EVAL_FILE, checkpoints_root, load_results, run_metrics

SUMMARY_COLUMNS = ["recipe", "kind", "claim", "setting", "number", "verdict", "gates_passed", "seeds", "scale"]
REQUIRED_FIELDS = ("claim", "setting", "number", "verdict", "scale")
FINDING_COLUMNS = ["recipe", "kind", "paper", "ours", "verdict", "finding"]
GATE_COLUMNS = ["recipe", "gate", "quantity", "value", "op", "threshold", "passed"]
EXTRA_TABLES = ("pass_dynamics", "traces", "lines", "distances", "intervals")
SPECIMEN_COLUMNS = ["recipe", "run", "task", "task_params", "mechanism", "shape", "params", "schedule", "steps", "seed",
                    "measure", "held_out", "held_out_schedule", "gate", "gate_value", "gate_passed"]
COMPUTE_COLUMNS = ["run", "task", "seed", "schedule", "steps", "flops", "pass_flops", "mean_passes", "flops_per_step",
                   "expected_flops"]


def _check_summaries(summaries: Mapping[str, Mapping[str, Any]]) -> None:
    if not summaries:
        raise ValueError("summaries is empty")
    for name, summary in summaries.items():
        missing = [c for c in REQUIRED_FIELDS if c not in summary]
        if missing:
            raise ValueError(f"summaries[{name!r}] lacks {missing}")


def load_summaries(recipes: Sequence[str] | None = None) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """``({recipe: summary}, [recipes without results])``."""
    summaries, missing = {}, []
    for recipe in RECIPES if recipes is None else recipes:
        try:  # ensure refuses an unknown recipe
            summaries[recipe] = ensure(recipe)
        except FileNotFoundError:
            missing.append(recipe)
    return summaries, missing


def summary_table(summaries: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """One row per recipe: the results page's head table."""
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
    """What we found, one row per recipe and per extension."""
    root = checkpoints_root() if root is None else Path(root)
    _check_summaries(summaries)
    rows = []
    for name, summary in summaries.items():
        check_recipe(name)
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
    """One row per gate of every recipe."""
    _check_summaries(summaries)
    rows = [{"recipe": name, "gate": g["name"], "quantity": g["quantity"],
             "value": np.nan if g["value"] is None else float(g["value"]),  # null: not measured
             "op": g["op"], "threshold": float(g["threshold"]), "passed": bool(g["passed"])}
            for name, summary in summaries.items() for g in summary.get("gates", [])]
    return pd.DataFrame(rows, columns=GATE_COLUMNS)


def recipe_tables(recipe: str) -> dict[str, pd.DataFrame]:
    """The tables a recipe wrote, by name."""
    check_recipe(recipe)
    return {"results": load_results(recipe), **{name: load_results(recipe, f"{name}.csv") for name in EXTRA_TABLES
                                                 if (checkpoints_root() / recipe / f"{name}.csv").is_file()}}


def per_example(recipe: str, run: str) -> pd.DataFrame:
    """A run's per-example evaluation, which its metric and paired intervals come from."""
    check_recipe(recipe)
    path = checkpoints_root() / recipe / run / EVAL_FILE
    if not path.is_file():
        raise ValueError(f"run={run!r} of recipe {recipe!r} has no {EVAL_FILE} under {checkpoints_root()}")
    return pd.read_csv(path)


def run_compute(recipe: str) -> pd.DataFrame:
    """Per trained run: recorded FLOPs, mean passes and the recomputed ``expected_flops`` (NaN where the work
    varies per step)."""
    check_recipe(recipe)
    runs = sorted(p.parent.name for p in (checkpoints_root() / recipe).glob("*/metrics.json"))
    if not runs:
        raise ValueError(f"runs is empty: recipe {recipe!r} has no trained runs under {checkpoints_root()}")
    rows = []
    for run in runs:
        metrics = run_metrics(recipe, run)
        cfg = TrainConfig.from_dict(metrics["train_config"])
        plain = step_flops(cfg, schedules.Single())
        varies = "pass_mix" in cfg.schedule.to_dict() or cfg.feedback_start > 0  # no one step's FLOPs to expect
        per_step = float("nan") if varies else step_flops(cfg)
        steps, flops = int(metrics["train"]["step"]), float(metrics["train"]["flops"])
        rows.append({"run": run, "task": cfg.task, "seed": cfg.seed, "schedule": cfg.schedule.to_dict()["schedule"],
                     "steps": steps,
                     "flops": flops, "pass_flops": plain, "mean_passes": flops / (steps * plain),
                     "flops_per_step": per_step, "expected_flops": steps * per_step})
    return pd.DataFrame(rows, columns=COMPUTE_COLUMNS)


def compute_matching(compute: pd.DataFrame, by: str | Sequence[str] = "task") -> pd.DataFrame:
    """Per group: ``matched`` when the FLOP spread is at most its largest step."""
    keys = [by] if isinstance(by, str) else list(by)
    missing = sorted((set(keys) | {"run", "flops", "steps"}) - set(compute.columns))
    if missing:
        raise ValueError(f"compute lacks the column(s) {missing} (by={by!r})")
    rows = []
    for key, group in compute.groupby(keys, sort=False):
        flops = group["flops"].to_numpy(dtype=float)
        largest_step = float(np.max(flops / group["steps"].to_numpy(dtype=float)))
        spread = float(flops.max() - flops.min())
        rows.append({**dict(zip(keys, key)), "runs": len(group),
                     "flops_min": float(flops.min()), "flops_max": float(flops.max()), "spread": spread,
                     "largest_step": largest_step, "ratio": float(flops.max() / flops.min()),
                     "matched": spread <= largest_step})
    return pd.DataFrame(rows)


def _schedule(cfg: TrainConfig) -> str:
    """A run's schedule in a few words."""
    value, spec = cfg.schedule, cfg.schedule.to_dict()
    symbol = "" if spec["schedule"] == "multipass" else f"{value.symbol}="
    knob = "" if value.knob is None else f" {symbol}{value.knob}"
    if "pass_mix" in spec:
        knob = " mix " + "/".join(f"{k}:{p:g}" for k, p in spec["pass_mix"].items())
    start = f" after {cfg.feedback_start:.0%} single" if cfg.feedback_start > 0 else ""
    return spec["schedule"] + knob + start


def specimens_table(summaries: Mapping[str, Mapping[str, Any]], root: str | Path | None = None) -> pd.DataFrame:
    """One row per shipped run (a *specimen*), with its own gate where the recipe gates each."""
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

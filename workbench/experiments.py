"""Experiments: each claim of the two papers as a recipe in code, reproduced at small scale.

A recipe names the claim it tests, builds its training runs (``RunSpec``: a ``TrainConfig`` plus
how the recorded metric is measured), trains what is not already up to date, saves every model to
``checkpoints/RECIPE/RUN/`` (config.json, model.safetensors, metrics.json, history.csv), analyses
the models into ``results.csv`` + ``results.png``, and states a verdict from a paired bootstrap
interval: *reproduces*, *does not reproduce*, or *inconclusive*. ``RESULTS.md`` is written from
those verdicts, so every number in it is computed here.

Runs compared "at matched compute" get their step counts from the same FLOP accounting the
trainer uses (``schedules.schedule_flops``): an interleaved run (2 passes of work per step) gets
half the steps of a single-pass baseline, a 3-pass run a third.

``python -m workbench reproduce NAME|all [--list] [--scale S] [--force] [--out DIR]``.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from . import __version__, schedules, tasks
from .checkpoint import load_checkpoint, load_metrics, save_checkpoint, write_json_atomic
from .evaluation import paired_difference, per_example_metrics, summarize, verdict
from .model import GPT, build_model
from .train import TrainConfig, train

DEFAULT_ROOT = Path("checkpoints")
ROOT_ENV = "WORKBENCH_CHECKPOINTS"  # where notebooks look for trained runs (default: the repo's checkpoints/)
FULL_ENV = "WORKBENCH_FULL"  # "1": notebooks retrain their recipe instead of loading it
EVAL_SEED = 1234  # the fixed held-out batch every recorded metric is measured on
SMALL_MODEL = {"n_layer": 2, "n_head": 2, "n_embd": 64}
LRT_MODEL = {**SMALL_MODEL, "mechanism": "lrt", "lrt_gamma_init": 0.1}
FBT_MODEL = {**SMALL_MODEL, "mechanism": "fbt"}
FBT_MIX = {1: 0.75, 2: 0.22, 3: 0.03}


@dataclass
class RunSpec:
    """One trained model of a recipe and the fixed evaluation its recorded metric comes from."""

    name: str  # directory under checkpoints/RECIPE/
    train: TrainConfig
    eval_schedule: dict[str, Any] = field(default_factory=lambda: {"schedule": "single"})
    eval_size: int = 256

    def eval_batch(self) -> tasks.Batch:
        return tasks.get(self.train.task, **self.train.task_params).sample(self.eval_size, EVAL_SEED, "val")


@dataclass
class Context:
    """What a recipe's analysis gets: its runs, their models and per-example evaluations."""

    recipe: Recipe
    runs: dict[str, RunSpec]
    models: dict[str, GPT]
    per_example: dict[str, pd.DataFrame]
    out: Path
    scale: float


@dataclass
class Outcome:
    """A recipe's result: a table, a figure, and the one-line summary RESULTS.md shows."""

    table: pd.DataFrame
    figure: Any  # matplotlib Figure
    number: str  # our number with its spread, in words
    verdict: str


@dataclass
class Recipe:
    name: str
    claim: str  # the seed's claim, in one sentence
    setting: str  # our setting, in one sentence
    build: Callable[[float], list[RunSpec]]
    analyze: Callable[[Context], Outcome]
    caveat: str = ""  # what the reader must know to read our number (no numbers here: those are computed)


# ---------------------------------------------------------------------------------------------- helpers
def _steps(base: int, scale: float) -> int:
    return max(2, int(round(base * scale)))


def matched_steps(cfg: TrainConfig, budget_flops: float) -> int:
    """Optimiser steps of ``cfg`` that spend ``budget_flops`` under the trainer's own accounting."""
    task = tasks.get(cfg.task, **cfg.task_params)
    model = build_model(cfg.model_config(task.vocab_size, task.seq_len), device="meta")
    per_step = schedules.schedule_flops(model, cfg.schedule, cfg.batch_size, task.seq_len, cfg.passes, cfg.subsets)
    return max(2, int(budget_flops // per_step))


def _config(task: str, model: dict, steps: int, seed: int, task_params: dict | None = None, **kw) -> TrainConfig:
    return TrainConfig(task=task, task_params=task_params or {}, model=dict(model), steps=steps, seed=seed,
                       batch_size=32, progress=False, log_every=10, eval_size=64, **kw)


def _budget_runs(prefix: str, specs: list[tuple[str, TrainConfig, dict]], base_steps: int, scale: float
                 ) -> list[RunSpec]:
    """Runs given the same training FLOPs as ``base_steps`` single-pass steps of the first config."""
    first = specs[0][1].replace(schedule="single", pass_mix=None, steps=_steps(base_steps, scale))
    task = tasks.get(first.task, **first.task_params)
    model = build_model(first.model_config(task.vocab_size, task.seq_len), device="meta")
    budget = schedules.schedule_flops(model, "single", first.batch_size, task.seq_len) * first.steps
    return [RunSpec(f"{prefix}{name}", cfg.replace(steps=matched_steps(cfg, budget)), ev)
            for name, cfg, ev in specs]


def _mean_over_seeds(ctx: Context, names: list[str], column: str) -> np.ndarray:
    """Per-example metric averaged over the seeds of one arm (examples are the same fixed batch)."""
    return np.mean([ctx.per_example[n][column].to_numpy() for n in names], axis=0)


def _compare(ctx: Context, arms: dict[str, list[str]], reference: str, column: str, lower_is_better: bool
             ) -> tuple[pd.DataFrame, dict[str, dict[str, float]]]:
    """Per arm: mean and seed spread of ``column``, and the paired interval of (arm - reference)."""
    rows, intervals = [], {}
    ref = _mean_over_seeds(ctx, arms[reference], column)
    for arm, names in arms.items():
        per_seed = [float(ctx.per_example[n][column].mean()) for n in names]
        row = {"arm": arm, "metric": column, "value": float(np.mean(per_seed)),
               "seed_std": float(np.std(per_seed)), "seeds": len(names)}
        if arm != reference:
            interval = paired_difference(ref, _mean_over_seeds(ctx, names, column), seed=len(rows))
            intervals[arm] = interval
            row.update({f"diff_vs_{reference}": interval["mean"], "ci_low": interval["low"],
                        "ci_high": interval["high"]})
        rows.append(row)
    table = pd.DataFrame(rows)
    table["better_if"] = "lower" if lower_is_better else "higher"
    return table, intervals


def _bar_figure(table: pd.DataFrame, title: str):
    from .plots import comparison_bars

    return comparison_bars(table, title=title)


def _describe(arm: str, interval: dict[str, float], unit: str) -> str:
    return f"{arm}: {interval['mean']:+.4f} {unit} [{interval['low']:+.4f}, {interval['high']:+.4f}]"


# ---------------------------------------------------------------------------------------------- recipes
RUNNING_SUM = {"p": 5, "length": 32}
EXACT = {"schedule": "sequential"}


def _lrt_vs_baseline_runs(scale: float) -> list[RunSpec]:
    runs = []
    for task, params, key in (("running_sum", RUNNING_SUM, "state"), ("text", {"seq_len": 64}, "text")):
        for seed in (0, 1):
            runs += _budget_runs(f"{key}_", [
                (f"baseline_s{seed}", _config(task, SMALL_MODEL, 1, seed, params), EXACT),
                (f"lrt_interleaved_s{seed}", _config(task, LRT_MODEL, 1, seed, params, schedule="interleaved",
                                                     subsets=2), EXACT),
            ], 300, scale)
    return runs


def _lrt_vs_baseline(ctx: Context) -> Outcome:
    tables, words, verdicts = [], [], []
    for key, column, lower, unit in (("state", "accuracy", False, "accuracy"), ("text", "loss", True, "nats")):
        arms = {arm: [n for n in ctx.runs if n.startswith(f"{key}_{arm}_")] for arm in ("baseline", "lrt_interleaved")}
        table, intervals = _compare(ctx, arms, "baseline", column, lower)
        table.insert(0, "task", "running_sum" if key == "state" else "text (bytes)")
        tables.append(table)
        iv = intervals["lrt_interleaved"]
        # does the LRT model use its memory? the same weights evaluated with no feedback at all
        lrt = arms["lrt_interleaved"]
        without = np.mean([per_example_metrics(ctx.models[n], ctx.runs[n].eval_batch())[column].to_numpy()
                           for n in lrt], axis=0)
        use = paired_difference(without, _mean_over_seeds(ctx, lrt, column))
        words.append(f"{'running_sum' if key == 'state' else 'text'} " + _describe("LRT - baseline", iv, unit)
                     + ", " + _describe("LRT exact - same weights without memory", use, unit))
        verdicts.append(verdict(iv, -1 if lower else 1))
    table = pd.concat(tables, ignore_index=True)
    return Outcome(table, _bar_figure(table, "LRT vs baseline at matched training FLOPs"),
                   "; ".join(words), _combine(verdicts))


def _schedule_runs(scale: float) -> list[RunSpec]:
    params = {"p": 5, "length": 16}
    specs = [(name, _config("running_sum", LRT_MODEL, 1, seed, params, **kw), EXACT)
             for seed in (0, 1)
             for name, kw in ((f"sequential_s{seed}", {"schedule": "sequential"}),
                              (f"interleaved_s{seed}", {"schedule": "interleaved", "subsets": 2}),
                              (f"multipass_s{seed}", {"schedule": "multipass", "passes": 2}),
                              (f"blockwise_s{seed}", {"schedule": "blockwise", "block": 4}))]
    return _budget_runs("", specs, 200, scale)


def _schedules(ctx: Context) -> Outcome:
    arms = {arm: [n for n in ctx.runs if n.startswith(arm + "_")]
            for arm in ("interleaved", "blockwise", "multipass", "sequential")}
    table, intervals = _compare(ctx, arms, "blockwise", "accuracy", False)
    iv = intervals["interleaved"]
    return Outcome(table, _bar_figure(table, "LRT trained under each schedule, evaluated exactly"),
                   _describe("interleaved - blockwise", iv, "accuracy") + "; "
                   + "; ".join(_describe(f"{a} - blockwise", intervals[a], "accuracy")
                               for a in ("multipass", "sequential")),
                   verdict(iv, 1))


def _source_runs(scale: float) -> list[RunSpec]:
    model = {**LRT_MODEL, "n_layer": 4}
    return [RunSpec(f"source_{name}_s{seed}",
                    _config("running_sum", {**model, "lrt_source_layer": layer}, _steps(150, scale), seed,
                            RUNNING_SUM, schedule="interleaved", subsets=2), EXACT)
            for seed in (0, 1) for name, layer in (("middle", 1), ("upper_middle", 2), ("top", -1))]


def _source_layer(ctx: Context) -> Outcome:
    arms = {arm: [n for n in ctx.runs if n.startswith(f"source_{arm}_s")] for arm in ("top", "middle", "upper_middle")}
    table, intervals = _compare(ctx, arms, "top", "accuracy", False)
    iv = intervals["upper_middle"]
    return Outcome(table, _bar_figure(table, "LRT source layer (4 layers): accuracy, exact decoding"),
                   _describe("upper-middle - top", iv, "accuracy") + "; "
                   + _describe("middle - top", intervals["middle"], "accuracy"), verdict(iv, 1))


def _ablation_runs(scale: float) -> list[RunSpec]:
    specs = []
    for seed in (0, 1):
        for name, inject in (("kv", ("kv",)), ("residual", ("residual",)), ("both", ("kv", "residual"))):
            specs.append((f"{name}_s{seed}", _config("running_sum", {**LRT_MODEL, "lrt_inject": inject}, 1, seed,
                                                      RUNNING_SUM, schedule="interleaved", subsets=2), EXACT))
        # the control: the same parameters and gates, trained and evaluated with no memory at all
        specs.append((f"control_s{seed}", _config("running_sum", LRT_MODEL, 1, seed, RUNNING_SUM),
                      {"schedule": "single"}))
    return _budget_runs("inject_", specs, 300, scale)


def _ablation(ctx: Context) -> Outcome:
    arms = {arm: [n for n in ctx.runs if n.startswith(f"inject_{arm}_s")] for arm in ("control", "kv", "residual",
                                                                                     "both")}
    table, intervals = _compare(ctx, arms, "control", "accuracy", False)
    both = _mean_over_seeds(ctx, arms["both"], "accuracy")
    over = {single: paired_difference(_mean_over_seeds(ctx, arms[single], "accuracy"), both)
            for single in ("kv", "residual")}
    words = "; ".join([_describe(f"{a} - control", intervals[a], "accuracy") for a in ("kv", "residual", "both")]
                      + [_describe(f"both - {a}", over[a], "accuracy") for a in ("kv", "residual")])
    return Outcome(table, _bar_figure(table, "LRT injection ablation (running_sum, exact decoding)"),
                   words, _combine([verdict(intervals["both"], 1), verdict(over["kv"], 1),
                                    verdict(over["residual"], 1)]))


def _fbt_mix_runs(scale: float) -> list[RunSpec]:
    mixes = {"1pass": {1: 1.0}, "75_25": {1: 0.75, 2: 0.25}, "75_22_3": FBT_MIX}
    return [RunSpec(f"mix_{name}", _config("text", FBT_MODEL, _steps(300, scale), 0, {"seq_len": 64},
                                           schedule="multipass", pass_mix=mix, passes=max(mix),
                                           feedback_start=0.3 if len(mix) > 1 else 0.0, prefix_mixin=0.5),
                    {"schedule": "multipass", "passes": 2})
            for name, mix in mixes.items()]


def _fbt_mixes(ctx: Context) -> Outcome:
    from .analysis import pass_dynamics

    passes = max(20, int(1000 * min(1.0, ctx.scale)))
    batch = next(iter(ctx.runs.values())).eval_batch()
    idx, targets = batch.tokens[:8], batch.targets[:8]
    frames = []
    for name, model in tqdm(ctx.models.items(), desc="pass dynamics", leave=False):
        frame = pass_dynamics(model, idx, passes=passes, targets=targets)
        frame.insert(0, "run", name)
        frames.append(frame)
    dyn = pd.concat(frames, ignore_index=True)
    dyn.to_csv(ctx.out / "pass_dynamics.csv", index=False)
    summary = []
    for name, frame in dyn.groupby("run", sort=False):
        first_two = frame[frame["pass"] <= 2]["loss"]
        summary.append({"arm": name, "loss_pass1": float(first_two.iloc[0]), "loss_pass2": float(first_two.iloc[-1]),
                         "loss_last": float(frame["loss"].iloc[-1]),
                         "loss_max_after_3": float(frame[frame["pass"] > 3]["loss"].max()),
                         "delta_last": float(frame["delta"].iloc[-1]),
                         "delta_max_after_3": float(frame[frame["pass"] > 3]["delta"].max())})
    table = pd.DataFrame(summary)
    from .plots import contraction_curves

    figure = contraction_curves({n: f for n, f in dyn.groupby("run", sort=False)})
    stable = table.set_index("arm")
    ok = stable.loc["mix_75_22_3", "loss_last"] <= stable.loc["mix_75_22_3", "loss_pass2"] + 0.05
    diverges = stable.loc["mix_75_25", "loss_last"] > stable.loc["mix_75_25", "loss_pass2"] + 0.05
    number = "; ".join(f"{r.arm}: loss pass 2 {r.loss_pass2:.3f} -> pass {passes} {r.loss_last:.3f}, "
                       f"final delta {r.delta_last:.2e}" for r in table.itertuples())
    outcome = "reproduces" if ok and diverges else ("does not reproduce" if not ok else "inconclusive")
    return Outcome(table, figure, number, outcome)


PROBE_TASKS = ("completion_tracking", "delayed_memory", "multi_register")


def _probe_runs(scale: float) -> list[RunSpec]:
    runs = []
    for task in PROBE_TASKS:
        runs.append(RunSpec(f"{task}_baseline", _config(task, {**SMALL_MODEL, "tie_embeddings": True},
                                                        _steps(300, scale), 0),
                            {"schedule": "single"}))
        runs.append(RunSpec(f"{task}_fbt", _config(task, FBT_MODEL, _steps(300, scale), 0, schedule="multipass",
                                                   pass_mix=FBT_MIX, passes=3, feedback_start=0.3, prefix_mixin=0.5),
                            EXACT))
    return runs


def _probes(ctx: Context) -> Outcome:
    from .analysis.probes import probe_layers

    n = max(48, int(400 * min(1.0, ctx.scale)))
    frames = []
    for name, model in tqdm(ctx.models.items(), desc="probes", leave=False):
        task = ctx.runs[name].train.task
        frame = probe_layers(model, tasks.get(task), conditions=("standard", "suffix1", "suffix2", "suffix4",
                                                                  "sequential"),
                             n=n, seed=EVAL_SEED, random_baseline=False)
        frame["run"] = name
        frame["model"] = "FBT" if name.endswith("_fbt") else "baseline"
        frames.append(frame)
    table = pd.concat(frames, ignore_index=True)
    layer0 = table[table["layer"] == 0]
    from .plots import layer0_comparison

    figure = layer0_comparison(layer0)
    fbt = layer0[layer0["run"].str.endswith("_fbt")].set_index(["task", "condition"])["accuracy"]
    lifted = [float(fbt[(t, "suffix1")] - fbt[(t, "standard")]) for t in PROBE_TASKS]
    number = "; ".join(f"{t}: layer-0 acc standard {fbt[(t, 'standard')]:.2f} -> suffix1 {fbt[(t, 'suffix1')]:.2f}"
                       for t in PROBE_TASKS)
    result = ("reproduces" if all(d > 0.15 for d in lifted)
              else "does not reproduce" if all(d < 0.05 for d in lifted) else "inconclusive")
    return Outcome(table, figure, number, result)


def _trace_runs(scale: float) -> list[RunSpec]:
    return [RunSpec(f"arith_fbt_s{seed}", _config("arith_cot", FBT_MODEL, _steps(400, scale), seed,
                                                  schedule="multipass", pass_mix=FBT_MIX, passes=3,
                                                  feedback_start=0.3, prefix_mixin=0.5),
                    {"schedule": "multipass", "passes": 2}) for seed in (0, 1)]


def _traces(ctx: Context) -> Outcome:
    from .analysis.traces import summarize_traces, trace_lengths
    from .plots import trace_lengths as plot_traces

    n = max(16, int(200 * min(1.0, ctx.scale)))
    frames = []
    for name, model in ctx.models.items():
        frame = trace_lengths(model, tasks.get("arith_cot"), regimes=("standard", "soft", "fused"), n=n,
                              seed=EVAL_SEED, max_new_tokens=48, prefill_passes=2)
        frame["run"] = name
        frames.append(frame)
    traces = pd.concat(frames, ignore_index=True)
    traces.to_csv(ctx.out / "traces.csv", index=False)
    table = summarize_traces(traces)
    wide = traces.pivot_table(index=["run", "example"], columns="regime", values=["length", "correct"])
    shorter = paired_difference(wide[("length", "standard")].to_numpy(), wide[("length", "soft")].to_numpy())
    accuracy = paired_difference(wide[("correct", "standard")].to_numpy().astype(float),
                                 wide[("correct", "soft")].to_numpy().astype(float))
    result = verdict(shorter, -1)
    if result == "reproduces" and accuracy["high"] < 0:
        result = "does not reproduce"  # shorter, but at a cost in accuracy
    number = (_describe("soft - standard", shorter, "tokens") + "; accuracy "
              + _describe("soft - standard", accuracy, ""))
    return Outcome(table, plot_traces(traces), number, result)


def _cross_runs(scale: float) -> list[RunSpec]:
    specs = []
    for seed in (0, 1):
        specs += [(f"fbt_multipass_s{seed}", _config("running_sum", FBT_MODEL, 1, seed, RUNNING_SUM,
                                                     schedule="multipass", passes=2), EXACT),
                  (f"fbt_interleaved_s{seed}", _config("running_sum", FBT_MODEL, 1, seed, RUNNING_SUM,
                                                       schedule="interleaved", subsets=2), EXACT),
                  (f"lrt_interleaved_s{seed}", _config("running_sum", LRT_MODEL, 1, seed, RUNNING_SUM,
                                                       schedule="interleaved", subsets=2), EXACT),
                  (f"lrt_multipass_s{seed}", _config("running_sum", LRT_MODEL, 1, seed, RUNNING_SUM,
                                                     schedule="multipass", passes=2), EXACT)]
    return _budget_runs("cross_", specs, 300, scale)


def _crosses(ctx: Context) -> Outcome:
    tables, words = [], []
    for mech, native, cross in (("fbt", "multipass", "interleaved"), ("lrt", "interleaved", "multipass")):
        arms = {f"{mech}_{s}": [n for n in ctx.runs if n.startswith(f"cross_{mech}_{s}_s")] for s in (native, cross)}
        table, intervals = _compare(ctx, arms, f"{mech}_{native}", "accuracy", False)
        tables.append(table)
        words.append(_describe(f"{mech}: {cross} - {native}", intervals[f"{mech}_{cross}"], "accuracy"))
    table = pd.concat(tables, ignore_index=True)
    return Outcome(table, _bar_figure(table, "Crosses: each mechanism under the other's schedule"),
                   "; ".join(words), "exploratory (no paper claim)")


def _combine(verdicts: list[str]) -> str:
    return verdicts[0] if len(set(verdicts)) == 1 else "mixed: " + ", ".join(verdicts)


RECIPES: dict[str, Recipe] = {r.name: r for r in [
    Recipe("lrt_vs_baseline", "LRT beats the baseline at matched training compute (lower BPB).",
           "2x64 models, 2 seeds, running_sum mod 5 (state accuracy, exact decoding) and stdlib bytes (loss).",
           _lrt_vs_baseline_runs, _lrt_vs_baseline,
           "At matched FLOPs an interleaved run takes half the optimiser steps of the baseline, so at a small "
           "budget the memory must pay for the steps it costs. The second interval shows whether the trained "
           "LRT weights use their memory at all."),
    Recipe("schedules", "Interleaved training clearly beats block-wise training.",
           "LRT 2x64 on running_sum (16 digits) under each schedule at matched FLOPs, evaluated exactly, 2 seeds.",
           _schedule_runs, _schedules),
    Recipe("source_layer", "An upper-middle source layer beats the final layer.",
           "LRT 4x64 on running_sum, source block 1 / 2 / top, interleaved S=2, 2 seeds.", _source_runs, _source_layer),
    Recipe("injection_ablation", "KV projection and residual injection are complementary; extra gates alone "
           "give negligible gains.", "LRT 2x64 on running_sum: kv / residual / both, and the same model trained "
           "without memory, at matched FLOPs, 2 seeds.", _ablation_runs, _ablation),
    Recipe("fbt_pass_mixes", "75/25 pass mixes diverge when iterated past training depth; 75/22/3 stays flat "
           "up to 1,000 passes.", "FBT 2x64 on stdlib bytes, progressive schedule, 1,000 fused passes on "
           "held-out text.", _fbt_mix_runs, _fbt_mixes,
           "Held-out sequences are far shorter than 1,000 tokens, and a causal Jacobi iteration is exact after "
           "as many passes as there are tokens (the residual is exactly 0 from there): the loss at the last "
           "pass is the loss of the exact recurrence, a depth none of the models was trained at. The paper "
           "iterated prompts far longer than the number of passes."),
    Recipe("layer0_probes", "One recurrent step lifts layer-0 probe accuracy from chance to near 100 %.",
           "Baseline and FBT 2x64 trained on each appendix-F task; linear probes at the final colon.",
           _probe_runs, _probes,
           "A probe can only find state the model computes: a task the small model did not learn gives "
           "chance under every condition (see its held-out answer accuracy in metrics.json). Decodability "
           "is not use."),
    Recipe("reasoning_traces", "Latent feedback (SOFT) gives shorter reasoning traces at equal or better "
           "accuracy.", "FBT 2x64 on arith_cot with mixed verbosity, 2 seeds, greedy decoding.",
           _trace_runs, _traces),
    Recipe("crosses", "(ours) FBT trained interleaved, LRT trained multi-pass.",
           "2x64 on running_sum at matched FLOPs, evaluated exactly, 2 seeds.", _cross_runs, _crosses),
]}


# ---------------------------------------------------------------------------------------------- running
def _up_to_date(path: Path, spec: RunSpec) -> bool:
    if not (path / "metrics.json").is_file():
        return False
    stored = load_metrics(path)
    return (stored.get("train_config") == spec.train.trajectory_dict() and stored.get("eval_schedule") ==
            spec.eval_schedule and stored.get("package_version") == __version__
            and stored.get("eval_size") == spec.eval_size)


EVAL_FILE = "eval_per_example.csv"


def evaluate_run(model: GPT, spec: RunSpec) -> pd.DataFrame:
    """The recorded evaluation of a run: per-example metrics on its fixed held-out batch."""
    return per_example_metrics(model, spec.eval_batch(), **spec.eval_schedule)


def train_run(spec: RunSpec, path: Path, scratch: Path, force: bool = False) -> tuple[GPT, pd.DataFrame]:
    """Train (or reuse, when up to date) one run; save its slim checkpoint, metrics, history and evaluation."""
    if not force and _up_to_date(path, spec) and (path / EVAL_FILE).is_file():
        return load_checkpoint(path), pd.read_csv(path / EVAL_FILE)
    run_dir = scratch / path.parent.name / path.name
    if force and run_dir.exists():
        shutil.rmtree(run_dir)
    cfg = spec.train.replace(out_dir=str(run_dir), resume=(run_dir / "checkpoint").is_dir())
    result = train(cfg)
    per_example = evaluate_run(result.model, spec)
    task = tasks.get(spec.train.task, **spec.train.task_params)
    metrics = {"eval": summarize(per_example, getattr(task, "bytes_per_token", 1.0)),
               "eval_schedule": spec.eval_schedule, "eval_size": spec.eval_size, "eval_seed": EVAL_SEED,
               "train": result.metrics, "train_config": spec.train.trajectory_dict(), "package_version": __version__,
               "recipe": path.parent.name, "run": spec.name, "seed": spec.train.seed}
    save_checkpoint(result.model, path, metrics=metrics,
                    extra={"recipe": path.parent.name, "run": spec.name, "seed": spec.train.seed})
    shutil.copyfile(run_dir / "history.csv", path / "history.csv")
    per_example.to_csv(path / EVAL_FILE, index=False)
    return result.model, per_example


def reproduce(name: str, root: str | Path = DEFAULT_ROOT, scale: float = 1.0, force: bool = False,
              scratch: str | Path = "runs") -> Outcome:
    """Run one recipe: train what is stale, analyse, and write results.csv, results.png, summary.json."""
    if name not in RECIPES:
        raise ValueError(f"recipe {name!r} is unknown: choose from {sorted(RECIPES)}")
    if not scale > 0:
        raise ValueError(f"scale={scale!r} is invalid: must be > 0")
    recipe = RECIPES[name]
    out = Path(root) / name
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    runs = {spec.name: spec for spec in recipe.build(scale)}
    models, per_example = {}, {}
    for n, spec in tqdm(runs.items(), desc=name, leave=False):
        models[n], per_example[n] = train_run(spec, out / n, Path(scratch), force)
    ctx = Context(recipe, runs, models, per_example, out, scale)
    outcome = recipe.analyze(ctx)
    outcome.table.to_csv(out / "results.csv", index=False)
    outcome.figure.savefig(out / "results.png", dpi=110, bbox_inches="tight")
    write_json_atomic(out / "summary.json", {"recipe": name, "claim": recipe.claim, "setting": recipe.setting,
                                              "number": outcome.number, "verdict": outcome.verdict,
                                              "scale": scale, "seconds": time.perf_counter() - started,
                                              "runs": sorted(runs)})
    return outcome


def write_results_md(root: str | Path = DEFAULT_ROOT, path: str | Path = "RESULTS.md") -> str:
    """RESULTS.md from every recipe's summary.json: one row per claim, numbers as computed."""
    root = Path(root)
    lines = ["# Results", "", "Written by `python -m workbench reproduce all` from each recipe's "
             "`checkpoints/RECIPE/summary.json`; every number is computed by `workbench/experiments.py`. "
             "Intervals are 95 % paired bootstrap intervals over held-out examples (averaged over seeds).", "",
             "| recipe | the seed's claim | our setting | our number | figure | verdict |",
             "| --- | --- | --- | --- | --- | --- |"]
    total = 0.0
    for name in RECIPES:
        summary_path = root / name / "summary.json"
        if not summary_path.is_file():
            lines.append(f"| {name} | {RECIPES[name].claim} | not run yet | | | |")
            continue
        s = json.loads(summary_path.read_text())
        total += sum(load_metrics(root / name / run)["train"]["seconds"] for run in s["runs"])
        lines.append(f"| {name} | {s['claim']} | {s['setting']} (scale {s['scale']}) | {s['number']} | "
                     f"![{name}]({root.as_posix()}/{name}/results.png) | **{s['verdict']}** |")
    caveats = [f"- **{name}**: {r.caveat}" for name, r in RECIPES.items() if r.caveat]
    lines += ["", "## Reading the numbers", "", *caveats, "",
              f"Training time of all runs as recorded in their metrics (2 CPU cores, shared): {total / 60:.1f} "
              "minutes; evaluation and analysis come on top."]
    text = "\n".join(lines) + "\n"
    Path(path).write_text(text)
    return text


# ---------------------------------------------------------------------------------------------- loading
def checkpoints_root() -> Path:
    """``$WORKBENCH_CHECKPOINTS`` if set, else the ``checkpoints/`` folder beside the package."""
    env = os.environ.get(ROOT_ENV)
    return Path(env) if env else Path(__file__).resolve().parents[1] / "checkpoints"


def ensure(recipe: str, scale: float | None = None) -> dict[str, Any]:
    """Make a recipe's results available and return its summary.

    With ``WORKBENCH_FULL=1`` the recipe is (re)trained at ``scale`` (default 1); otherwise its
    checkpoints are loaded as they are, and a missing recipe is an error that says how to make it.
    """
    root = checkpoints_root()
    if os.environ.get(FULL_ENV) == "1":
        reproduce(recipe, root=root, scale=1.0 if scale is None else scale)
    path = root / recipe / "summary.json"
    if not path.is_file():
        raise FileNotFoundError(f"no results for recipe {recipe!r} under {root}: run "
                                f"'python -m workbench reproduce {recipe}' (or set {FULL_ENV}=1)")
    return json.loads(path.read_text())


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


def smoke_scale() -> float:
    """The scale the test suite runs every recipe at: a few steps each, small evaluations."""
    return 0.01


def list_recipes() -> pd.DataFrame:
    return pd.DataFrame([{"recipe": r.name, "claim": r.claim, "setting": r.setting, "runs": len(r.build(1.0))}
                         for r in RECIPES.values()])


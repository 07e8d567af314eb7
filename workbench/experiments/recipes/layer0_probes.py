"""Layer-0 accessibility of the fed-back state, on specimens that learned (arXiv 2608.08888, appendix F).

A probe of a model that never learned its task measures nothing, so each specimen is gated per scratch length and one
that misses is never probed. Rules: (a) the paper's; (b) ours: is the lift learned, or the untrained twin's
architecture?"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch

from ... import tasks
from ...analysis.features import answer_correct, check_batch, probe_features
from ...analysis.probes import (
    PROBE_CS,
    control_labels,
    control_position,
    fit_probe,
    group_interval,
    probe_layers,
    random_init_model,
    regularisation_path,
)
from ...checkpoint import load_checkpoint
from ...model import GPT
from ...validation import fail
from ..core import (
    EVAL_SEED,
    Context,
    Extension,
    Finding,
    Gate,
    GateResult,
    Outcome,
    Recipe,
    default_finding,
    lead,
    preregistered,
)
from ..pool import map_jobs
from ..probe_specimens import (
    ARM_SEEDS,
    ARM_STEPS,
    ARMS,
    COMPETENT,
    FBT_MODEL,
    GATE_CONDITION,
    GATE_N,
    MODEL,
    PROBE_TASKS,
    SCRATCH,
    TEXT_TASK,
    build,
    gate_batch,
    probe_task,
    run_name,
    specimen_key,
    specimen_label,
)

CONDITIONS = ("standard", "suffix1", "suffix2", "suffix4", "sequential")
FEEDBACK_ARMS = ("fbt", "lrt")
# Training minutes on 2 quiet cores (CPU times packed on 2 one-thread workers); over budget on an AVX2-only EPYC.
BUDGET_MINUTES = 40.0
ANSWER_CONDITIONS = {"baseline": ("standard",), "fbt": ("standard", "suffix1", "multipass2", "sequential"),
                     "lrt": ("standard", "suffix1", "multipass2", "sequential")}
TEXT_SCRATCH = (0, 8)
TEXT_MARGIN = 0.5  # nats/byte the text model must sit below the unigram loss before it is probed

PROBE_N = 1600  # examples probed per specimen (grouped 4-fold CV: 400 held out per fold)
PROBE_SEED = EVAL_SEED + 1  # probe examples: held out, and not the examples the gate was measured on
LIFT = 0.95  # (a): layer-0 accuracy after one recurrent step the paper's claim needs
NEAR_MAJORITY = 0.05  # (a): standard prefill within this of majority; (b): a twin "lifts" beyond it
FAILS = 0.8  # (a): a suffix-1 interval wholly below this does not reproduce

PAPER_TASKS = ("completion_tracking", "delayed_memory")
# beyond the claim, each with its own row: (label, arm, tasks)
EXTENSIONS = (("multi_register (FBT)", "fbt", ("multi_register",)), ("LRT", "lrt", PROBE_TASKS),
              ("the text-only FBT", "text fbt", ("delayed_memory",)))

PREREGISTERED = preregistered(
    "layer0_probes", MODEL=MODEL, FBT_MODEL=FBT_MODEL, FBT_SEEDS=", ".join(map(str, ARM_SEEDS["fbt"])),
    ARM_STEPS=ARM_STEPS, BUDGET_MINUTES=BUDGET_MINUTES, PROBE_N=PROBE_N, PAPER_TASKS=", ".join(PAPER_TASKS),
    LIFT=LIFT, NEAR_MAJORITY=NEAR_MAJORITY, FAILS=FAILS, PROBE_CS=list(PROBE_CS),
    EXTENSIONS=", ".join(e[0] for e in EXTENSIONS), COMPETENT=COMPETENT, TEXT_MARGIN=TEXT_MARGIN)

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def specimen_gate(task: str, arm: str, scratch: int, seed: int = 0) -> Gate:
    return Gate(f"{run_name(task, arm, seed)} s{scratch} answer accuracy",
                f"held-out answer accuracy, {GATE_N} examples with {scratch} scratch lines, under "
                f"{GATE_CONDITION[arm]}", ">=", COMPETENT)


GATED_FBT = "gated FBT specimens of the paper's tasks"
TEXT_GATE = Gate("text_fbt below unigram", "unigram loss - held-out loss (nats/byte, multipass 2)", ">=",
                 TEXT_MARGIN)


def answer_accuracies(model: GPT, task: str, arm: str, scratch: int, seed: int = EVAL_SEED, n: int = GATE_N,
                      conditions: tuple[str, ...] | None = None) -> dict[str, float]:
    """Held-out answer accuracy per condition the arm is read in (or ``conditions``)."""
    batch = gate_batch(task, scratch, seed, n)
    return {c: float(answer_correct(model, batch, c).mean()) for c in conditions or ANSWER_CONDITIONS[arm]}


def upper_bound(model: GPT, batch: tasks.Batch, *, labels: np.ndarray | torch.Tensor | None = None, folds: int = 4,
                C: float = 0.1, max_iter: int = 500, seed: int = 0, batch_size: int = 1024) -> dict[str, float]:
    """Top-layer probe one before the label, plain pass: one recurrent step hands layer 0 exactly that state, so it
    is the ceiling for ``suffix1`` layer 0."""
    check_batch(batch)
    if bool((batch.label_positions < 1).any()):
        raise ValueError("batch has a label at position 0: there is no fed-back position before it")
    shifted = dataclasses.replace(batch, label_positions=batch.label_positions - 1)
    target = np.asarray(batch.labels if labels is None else labels)
    groups = batch.groups.cpu().numpy()
    top = probe_features(model, shifted, "standard", batch_size=batch_size)[-1]
    result = fit_probe(top.numpy(), target, groups, folds=folds, C=C, max_iter=max_iter)
    interval = group_interval(result["held_out"], groups, seed=seed)
    return {"accuracy": result["accuracy"], "accuracy_low": interval["low"], "accuracy_high": interval["high"],
            "majority": result["majority"], "n": len(target)}


def _probe(model: GPT, task: tasks.Task, n: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every depth x condition, and the layer-0 suffix1 L2 paths."""
    batch = task.sample(n, seed, "val")
    frame = probe_layers(model, batch, CONDITIONS, seed=seed, random_baseline=True, C=PROBE_CS)
    twin = random_init_model(model, seed)
    bound = upper_bound(model, batch, seed=seed)
    frame["task"] = task.name
    frame["upper_bound"], frame["upper_bound_low"] = bound["accuracy"], bound["accuracy_low"]
    frame["upper_bound_high"] = bound["accuracy_high"]
    frame["twin_upper_bound"] = upper_bound(twin, batch, seed=seed)["accuracy"]
    position = control_position(batch)
    control = None if position is None else control_labels(batch, position, seed=seed)
    groups = batch.groups.cpu().numpy()
    path = pd.concat([regularisation_path(probe_features(m, batch, "suffix1")[0].numpy(), batch.labels.cpu().numpy(),
                                          groups, PROBE_CS, control_labels=control, seed=seed).assign(model=name)
                      for name, m in (("trained", model), ("random init", twin))], ignore_index=True)
    return frame, path.assign(task=task.name)


def lift_source(row: pd.Series) -> str:
    """Rule (b) on one trained suffix1 layer-0 row."""
    architectural = row["twin_accuracy_low"] > row["majority"] + NEAR_MAJORITY
    learned = row["twin_low"] > 0
    return {(True, True): "both", (True, False): "architectural", (False, True): "learned",
            (False, False): "none"}[(bool(architectural), bool(learned))]


def lift_outcome(accuracy: float, high: float, standard_gap: float) -> str:
    """Rule (a) on one specimen."""
    if high < FAILS:
        return "fails"
    return "lifts" if accuracy >= LIFT and abs(standard_gap) <= NEAR_MAJORITY else "between"


def specimen_outcomes(rows: pd.DataFrame, path: pd.DataFrame) -> pd.DataFrame:
    """Rule (a) per specimen at the chosen and every plausible L2 strength; does it flip?"""
    out = []
    if rows.empty:
        return pd.DataFrame(columns=OUTCOME_COLUMNS)
    for (run, arm, seed, task, scratch), sub in rows.groupby(["run", "arm", "seed", "task", "scratch_updates"],
                                                             sort=False):
        s1 = sub[sub["condition"] == "suffix1"].iloc[0]
        gap = float(sub[sub["condition"] == "standard"].iloc[0]["accuracy"] - s1["majority"])
        chosen = lift_outcome(s1["accuracy"], s1["accuracy_high"], gap)
        on_path = path[(path["run"] == run) & (path["scratch_updates"] == scratch) & (path["model"] == "trained")
                       & path["plausible"]]
        along = {float(r.C): lift_outcome(r.accuracy, r.accuracy_high, gap) for r in on_path.itertuples()}
        out.append({"run": run, "arm": arm, "seed": seed, "task": task, "scratch_updates": scratch,
                    "specimen": f"{arm.upper()} {specimen_key(task, scratch, seed)}", "accuracy": s1["accuracy"],
                    "accuracy_low": s1["accuracy_low"], "accuracy_high": s1["accuracy_high"], "C": s1["C"],
                    "outcome": chosen, "path_outcomes": along, "flips": any(v != chosen for v in along.values())})
    return pd.DataFrame(out, columns=OUTCOME_COLUMNS)


OUTCOME_COLUMNS = ["run", "arm", "seed", "task", "scratch_updates", "specimen", "accuracy", "accuracy_low",
                   "accuracy_high", "C", "outcome", "path_outcomes", "flips"]


def claim_verdict(outcomes: pd.DataFrame) -> str:
    """Rule (a) over specimens' outcomes."""
    if outcomes.empty:
        return "not tested: no gated specimen"
    if outcomes["flips"].any():
        flipped = outcomes[outcomes["flips"]]
        said = "; ".join(f"{r.specimen}: {r.outcome} at the chosen C={r.C:g}, "
                         + ", ".join(f"{v} at C={c:g}" for c, v in r.path_outcomes.items() if v != r.outcome)
                         for r in flipped.itertuples())
        return f"inconclusive: the verdict flips with the probe's L2 strength ({said})"
    if (outcomes["outcome"] == "fails").any():
        return "does not reproduce"
    return "reproduces" if (outcomes["outcome"] == "lifts").all() else "inconclusive"


def extension_verdict(label: str, verdict: str) -> str:
    """Rule (a)'s verdict on specimens beyond the claim, worded as an extension."""
    if verdict.startswith("not tested"):
        return f"not tested for {label}: no gated specimen"
    if verdict.startswith("inconclusive"):
        return f"inconclusive for {label}" + verdict[len("inconclusive"):]
    return {"reproduces": f"the claim extends to {label}",
            "does not reproduce": f"the claim does not extend to {label}"}[verdict]


def _gate_saved(path: str, task: str, arm: str, scratch: int, seed: int, n: int) -> dict:
    """One saved specimen's ``specimens`` row."""
    answers = answer_accuracies(load_checkpoint(path), task, arm, scratch, n=n)
    gate = specimen_gate(task, arm, scratch, seed).check(answers[GATE_CONDITION[arm]])
    exact = answers.get("sequential", answers["standard"])  # a baseline's exact schedule is its plain pass
    return {"run": run_name(task, arm, seed), "task": task, "arm": arm, "seed": seed,
            "label": specimen_label(arm, seed), "scratch_updates": scratch,
            "gate": gate.gate.name, "gate_condition": GATE_CONDITION[arm], "gate_value": gate.value,
            "gated": gate.passed, "exact_ok": exact >= COMPETENT, **{f"answer_{c}": v for c, v in answers.items()}}


def specimens(ctx: Context, n: int = GATE_N) -> pd.DataFrame:
    """Per specimen and scratch length: answer accuracy per condition, and the gate."""
    calls = [(str(ctx.out / run_name(t, a, sd)), t, a, s, sd, n)
             for t in PROBE_TASKS for a in ARMS for sd in ARM_SEEDS[a] for s in SCRATCH]
    return pd.DataFrame(map_jobs(_gate_saved, calls, ctx.jobs, desc="gates"))


def _probe_saved(path: str, task: str, scratch: int, tokenizer: str, n: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    return _probe(load_checkpoint(path), probe_task(task, scratch, tokenizer), n, PROBE_SEED)


def probes(ctx: Context, table: pd.DataFrame, text_gated: bool,
           n: int = PROBE_N) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``_probe`` of every gated specimen, the text model included."""
    jobs = [(r.run, r.arm, r.seed, r.label, r.task, r.scratch_updates, "ascii")
            for r in table[table["gated"]].itertuples()]
    jobs += [("text_fbt", "text fbt", 0, "text fbt", "delayed_memory", s, "bytes") for s in TEXT_SCRATCH
             if text_gated]
    done = map_jobs(_probe_saved, [(str(ctx.out / j[0]), j[4], j[5], j[6], n) for j in jobs], ctx.jobs,
                    desc="probes")
    frames, paths = [], []
    for (run, arm, seed, label, _, scratch, _), (frame, path) in zip(jobs, done):
        frames.append(frame.assign(run=run, arm=arm, seed=seed, label=label, scratch_updates=scratch))
        paths.append(path.assign(run=run, arm=arm, seed=seed, scratch_updates=scratch,
                                 specimen=f"{arm.upper()} {specimen_key('', scratch, seed)}"))
    if not frames:
        return pd.DataFrame(columns=PROBE_COLUMNS), pd.DataFrame(columns=PATH_COLUMNS)
    out = pd.concat(frames, ignore_index=True)
    # the twin's own interval joins the trained rows, for rule (b)
    key = ["run", "scratch_updates", "condition", "layer"]
    twin = out[out["model"] == "random init"].set_index(key)["accuracy_low"]
    out["twin_accuracy_low"] = twin.reindex(pd.MultiIndex.from_frame(out[key])).to_numpy()
    return out[PROBE_COLUMNS], pd.concat(paths, ignore_index=True)[PATH_COLUMNS]


PROBE_COLUMNS = ["run", "arm", "seed", "label", "task", "scratch_updates", "model", "condition", "layer", "n",
                 "accuracy", "accuracy_std", "accuracy_low", "accuracy_high", "control_accuracy", "selectivity",
                 "majority", "C",
                 "twin_accuracy", "twin_accuracy_low", "twin_selectivity", "twin_low", "twin_high", "upper_bound",
                 "upper_bound_low", "upper_bound_high", "twin_upper_bound"]
PATH_COLUMNS = ["run", "arm", "seed", "task", "scratch_updates", "specimen", "model", "C", "accuracy", "accuracy_low",
                "accuracy_high", "control_accuracy", "selectivity", "plausible"]


def verdicts(trained0: pd.DataFrame, path: pd.DataFrame) -> tuple[str, list[Extension], pd.DataFrame]:
    """Rule (a): the claim's verdict, one per ``EXTENSIONS`` entry, every specimen's outcome."""
    outcomes = specimen_outcomes(trained0, path)
    claim = outcomes[(outcomes["arm"] == "fbt") & outcomes["task"].isin(PAPER_TASKS)]
    extensions = []
    for label, arm, on in EXTENSIONS:
        rows = outcomes[(outcomes["arm"] == arm) & outcomes["task"].isin(on)]
        said = ", ".join(f"{r.specimen} {r.accuracy:.3f} ({r.outcome})" for r in rows.itertuples())
        extensions.append(Extension(label, extension_verdict(label, claim_verdict(rows)),
                                    f"layer-0 suffix1 accuracy: {said}" if said else "no gated specimen"))
    return claim_verdict(claim), extensions, outcomes


def analyze(ctx: Context) -> Outcome:
    from ...plots import regularisation_paths, specimen_gates

    table = specimens(ctx, max(8, int(GATE_N * min(1.0, ctx.scale))))
    table.to_csv(ctx.out / "specimens.csv", index=False)
    unigram = tasks.get("text", **TEXT_TASK).unigram_loss()
    text_eval = ctx.per_example["text_fbt"]
    text_loss = float(text_eval["nats"].sum() / text_eval["targets"].sum())
    text_gate = TEXT_GATE.check(unigram - text_loss)
    results, path = probes(ctx, table, text_gate.passed, max(64, int(PROBE_N * min(1.0, ctx.scale))))
    path.to_csv(ctx.out / "path.csv", index=False)
    if not path.empty:
        regularisation_paths(path, LIFT, chance=float(results["majority"].mean())).savefig(
            ctx.out / "path.png", dpi=110, bbox_inches="tight")
    trained0 = results[(results["model"] == "trained") & (results["layer"] == 0)]
    lifts = {arm: {specimen_key(prefix or r["task"], r["scratch_updates"], r["seed"]): lift_source(r)
                   for _, r in trained0[(trained0["arm"] == name) & (trained0["condition"] == "suffix1")].iterrows()}
             for arm, name, prefix in (("fbt", "fbt", None), ("lrt", "lrt", None), ("text", "text fbt", "text"))}
    paper = table[(table["arm"] == "fbt") & table["task"].isin(PAPER_TASKS)]["gated"]
    claim, extensions, outcomes = verdicts(trained0, path)
    verdict = (f"{claim} (over the {int(paper.sum())} of {len(paper)} FBT specimens of the paper's two tasks that "
               "passed their gate)")
    gates = {GATED_FBT: float(paper.sum())}
    def draw(gated: str):
        return (probe_figure(results, f"{ctx.recipe.name}: {gated}") if not trained0.empty
                else specimen_gates(table, COMPETENT, by="label"))

    return Outcome(results, draw, _number(table, trained0, lifts, text_gate, outcomes), verdict, gates,
                   chance="the majority label of each task (balanced by construction: 0.5), and the untrained twin",
                   extensions=extensions,
                   extra={"specimens": json.loads(table.to_json(orient="records")), "lift_source": lifts["fbt"],
                          "lrt_lift_source": lifts["lrt"], "text_lift_source": lifts["text"],
                          "outcomes": json.loads(outcomes.drop(columns=["path_outcomes"], errors="ignore")
                                                 .to_json(orient="records")),
                          "text_gate": {"name": text_gate.gate.name, "value": text_gate.value,
                                        "passed": text_gate.passed, "unigram": unigram, "loss": text_loss}})


def _lift(rows: pd.DataFrame, label: str, lift: str, outcome: str) -> str:
    """One specimen's layer-0 numbers in words."""
    rows = rows.set_index("condition")
    s1 = rows.loc["suffix1"]
    return (f"{label}: layer-0 standard {rows.loc['standard', 'accuracy']:.3f} -> suffix1 {s1['accuracy']:.3f} "
            f"[{s1['accuracy_low']:.3f}, {s1['accuracy_high']:.3f}] (C={s1['C']:g}, {outcome}), twin "
            f"{s1['twin_accuracy']:.3f}, upper bound {s1['upper_bound']:.3f}, lift {lift}")


def _number(specimens: pd.DataFrame, trained0: pd.DataFrame, lifts: dict[str, dict[str, str]],
            text_gate: GateResult, outcomes: pd.DataFrame) -> str:
    said = {(r.run, r.scratch_updates): r.outcome + (" but flips with C" if r.flips else "")
            for r in outcomes.itertuples()}
    parts = []
    for r in specimens[specimens["arm"].isin(FEEDBACK_ARMS)].itertuples():
        key = specimen_key(r.task, r.scratch_updates, r.seed)
        name = f"{r.arm.upper()} {key}"
        if not r.gated:
            parts.append(f"{name}: missed its gate (answer accuracy {r.gate_value:.3f} < {COMPETENT})")
            continue
        rows = trained0[(trained0["run"] == r.run) & (trained0["scratch_updates"] == r.scratch_updates)]
        parts.append(_lift(rows, name, lifts[r.arm][key], said[r.run, r.scratch_updates])
                     + ("" if r.exact_ok else f"; exact answer accuracy {r.answer_sequential:.3f}: unfit for SOFT"))
    if text_gate.passed:
        text0 = trained0[trained0["arm"] == "text fbt"]
        parts += [_lift(text0[text0["scratch_updates"] == s], f"text FBT on delayed_memory s{s}",
                        lifts["text"][specimen_key("text", s, 0)], said["text_fbt", s]) for s in TEXT_SCRATCH]
    else:
        parts.append(f"text FBT not probed: {text_gate.describe()}")
    return "; ".join(parts)


def probe_figure(results: pd.DataFrame, title: str | None = None) -> Figure:
    """Trained specimens' layer-0 probes: the recipe's figure and the explorer's redraw."""
    from ...plots import layer0_comparison

    trained0 = results[(results["model"] == "trained") & (results["layer"] == 0)]
    return layer0_comparison(trained0.assign(model=trained0["label"]), title=title)


def finding(summary: dict, results: pd.DataFrame) -> Finding:
    """The layer-0 lift on the paper's tasks beside the untrained twin's."""
    rows = results[(results["model"] == "trained") & (results["arm"] == "fbt") & (results["layer"] == 0)
                   & (results["condition"] == "suffix1")]
    paper = rows[rows["task"].isin(PAPER_TASKS)]
    gated = [s for s in summary["specimens"] if s["arm"] == "fbt" and s["gated"] and s["task"] in PAPER_TASKS]
    if paper.empty or not gated:
        return default_finding(summary, results)
    lift = f"{paper['accuracy'].min():.3f}-{paper['accuracy'].max():.3f}"
    return Finding(f"layer-0 accuracy after one step {lift} on the paper's tasks",
                   lead(summary) or f"One recurrent step lifts the label's layer-0 probe accuracy to {lift} on the "
                   f"{len(gated)} competent FBT specimens of the paper's two tasks, against "
                   f"{paper['twin_accuracy'].min():.3f}-{paper['twin_accuracy'].max():.3f} for an untrained twin of "
                   "the same architecture.")


RECIPE = Recipe(
    "layer0_probes", build=build, analyze=analyze,
    gates=(Gate(GATED_FBT, f"FBT specimens of {' and '.join(PAPER_TASKS)} (task x scratch length) whose held-out "
                           f"answer accuracy under suffix1 is >= {COMPETENT}; rule (a) reads these; each "
                           "specimen's own gate is in specimens.csv",
                ">=", 1),),
    finding=finding, **PREREGISTERED)


def explorer_compute(results: pd.DataFrame):
    """``(keys, compute)`` for ``widgets.probe_explorer`` over the recorded probes."""
    trained = results[results["model"] == "trained"]
    keys = {f"{t} / {s} scratch lines": (t, s) for t, s in trained[["task", "scratch_updates"]].drop_duplicates()
            .itertuples(index=False)}

    def compute(key: str, condition: str) -> pd.DataFrame:
        if key not in keys:
            fail("key", key, f"must be one of {list(keys)}")
        task, scratch = keys[key]
        rows = trained[(trained["task"] == task) & (trained["scratch_updates"] == scratch)
                       & (trained["condition"] == condition)]
        return rows.assign(model=rows["label"]).reset_index(drop=True)

    return list(keys), compute

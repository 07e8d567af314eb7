"""Layer-0 accessibility of the fed-back state, on specimens that learned (FBT paper, arXiv 2608.08888, appendix F).

The paper probes its three synthetic tasks at the position whose output predicts the label and
finds the label near chance at layer 0 under standard prefill, and at 99.6 % (completion tracking)
and 100 % (delayed memory) after one recurrent step. A probe of a model that never learned its task
measures nothing, so every specimen here is **gated** first: held-out answer accuracy >= 0.95 at
each scratch length under the condition it is probed in (one recurrent step for FBT: a plain
prefill, then the exact recurrence through the answer; one plain pass for the baseline). A
specimen that misses its gate is reported with its accuracy and never probed.

Each model trains on a mix of scratch lengths (0, 8 and 32 label-free lines, drawn per group): the
short contexts teach the lookup the long ones need, and one model then serves every length, each
length with its own gate. Two questions, two rules, both fixed here before anything trains:
(a) the paper's claim, over every gated FBT specimen; (b) ours: is the lift learned? — each trained
specimen against its untrained twin (same config, random init), whose recurrent step can expose
the label through the architecture alone. A second arm probes a byte-level FBT language model
trained on text only (the paper's own setting) on the same delayed-memory prompts.
"""

from __future__ import annotations

import json

import pandas as pd
from tqdm.auto import tqdm

from ... import tasks
from ...analysis.probes import answer_correct, probe_layers, random_init_model, upper_bound
from ...model import GPT
from ..core import EVAL_SEED, Context, Finding, Gate, GateResult, Outcome, Recipe, default_finding, lead
from ..probe_specimens import (
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
)

CONDITIONS = ("standard", "suffix1", "suffix2", "suffix4", "sequential")
FEEDBACK_ARMS = ("fbt", "lrt")
# Training minutes of the whole recipe on 2 quiet cores: its runs' CPU times packed on 2 one-thread workers
# (the summary's quiet_wall_minutes; on a shared machine the wall clock would measure the other load too).
BUDGET_MINUTES = 30.0
ANSWER_CONDITIONS = {"baseline": ("standard",), "fbt": ("standard", "suffix1", "multipass2", "sequential"),
                     "lrt": ("standard", "suffix1", "multipass2", "sequential")}
TEXT_SCRATCH = (0, 8)
TEXT_MARGIN = 0.5  # nats/byte the text model must sit below the unigram loss before it is probed

PROBE_N = 1600  # examples probed per specimen (grouped 4-fold CV: 400 held out per fold)
PROBE_SEED = EVAL_SEED + 1  # probe examples: held out, and not the examples the gate was measured on
LIFT = 0.95  # (a): layer-0 accuracy after one recurrent step the paper's claim needs
NEAR_MAJORITY = 0.05  # (a): standard prefill within this of majority; (b): a twin "lifts" beyond it
FAILS = 0.8  # (a): a suffix-1 interval wholly below this does not reproduce

RULE = (f"(a) the paper's claim: reproduces when every gated FBT specimen's layer-0 probe accuracy after one "
        f"recurrent step (suffix1) is >= {LIFT} while standard prefill stays within {NEAR_MAJORITY} of the majority "
        f"rate; does not reproduce when a gated FBT specimen's suffix1 layer-0 95 % interval (group bootstrap) lies "
        f"below {FAILS}; inconclusive otherwise. (b) ours: per task and scratch length, each trained FBT (and, "
        f"beyond the paper, LRT) specimen against its untrained twin at suffix1, layer 0: the lift is "
        f"'architectural' when the twin's accuracy interval lies more than {NEAR_MAJORITY} above majority, "
        f"'learned' when the trained - twin interval lies "
        f"above 0, 'both' when both hold, 'none' when neither. A specimen is gated by held-out answer accuracy "
        f">= {COMPETENT} at its scratch length under the condition it is probed in; one that misses is never "
        f"probed. The text arm is probed only when its held-out loss is >= {TEXT_MARGIN} nats/byte below unigram.")








def specimen_gate(task: str, arm: str, scratch: int) -> Gate:
    return Gate(f"{run_name(task, arm)} s{scratch} answer accuracy",
                f"held-out answer accuracy, {GATE_N} examples with {scratch} scratch lines, under "
                f"{GATE_CONDITION[arm]}", ">=", COMPETENT)


GATED_FBT = "gated FBT specimens"
TEXT_GATE = Gate("text_fbt below unigram", "unigram loss - held-out loss (nats/byte, multipass 2)", ">=",
                 TEXT_MARGIN)








def answer_accuracies(model: GPT, task: str, arm: str, scratch: int, seed: int = EVAL_SEED, n: int = GATE_N,
                      conditions: tuple[str, ...] | None = None) -> dict[str, float]:
    """A specimen's held-out answer accuracy under each condition its arm is read in (or ``conditions``)."""
    batch = gate_batch(task, scratch, seed, n)
    return {c: float(answer_correct(model, batch, c).mean()) for c in conditions or ANSWER_CONDITIONS[arm]}


def _probe(model: GPT, task: tasks.Task, n: int, seed: int) -> pd.DataFrame:
    """Every depth x condition with control task and twin, plus the fed-back upper bound as columns."""
    batch = task.sample(n, seed, "val")
    frame = probe_layers(model, batch, CONDITIONS, seed=seed, random_baseline=True)
    bound = upper_bound(model, batch, seed=seed)
    frame["task"] = task.name
    frame["upper_bound"], frame["upper_bound_low"] = bound["accuracy"], bound["accuracy_low"]
    frame["upper_bound_high"] = bound["accuracy_high"]
    twin_bound = upper_bound(random_init_model(model, seed), batch, seed=seed)
    frame["twin_upper_bound"] = twin_bound["accuracy"]
    return frame


def lift_source(row: pd.Series) -> str:
    """Rule (b) on one trained suffix1 layer-0 row (with its twin columns and the twin's own interval)."""
    architectural = row["twin_accuracy_low"] > row["majority"] + NEAR_MAJORITY
    learned = row["twin_low"] > 0
    return {(True, True): "both", (True, False): "architectural", (False, True): "learned",
            (False, False): "none"}[(bool(architectural), bool(learned))]


def claim_verdict(rows: pd.DataFrame) -> str:
    """Rule (a) over the gated FBT specimens' layer-0 rows (suffix1 and standard)."""
    suffix1 = rows[rows["condition"] == "suffix1"]
    standard = rows[rows["condition"] == "standard"]
    if suffix1.empty:
        return "not tested: no gated FBT specimen"
    if (suffix1["accuracy_high"] < FAILS).any():
        return "does not reproduce"
    near = ((standard["accuracy"] - standard["majority"]).abs() <= NEAR_MAJORITY).all()
    return "reproduces" if (suffix1["accuracy"] >= LIFT).all() and near else "inconclusive"


def specimens(ctx: Context, n: int = GATE_N) -> pd.DataFrame:
    """One row per (task, arm, scratch length): answer accuracy under each condition, and the gate."""
    rows = []
    for task, arm, scratch in tqdm([(t, a, s) for t in PROBE_TASKS for a in ARMS for s in SCRATCH],
                                   desc="gates", leave=False):
        answers = answer_accuracies(ctx.models[run_name(task, arm)], task, arm, scratch, n=n)
        gate = specimen_gate(task, arm, scratch).check(answers[GATE_CONDITION[arm]])
        exact = answers.get("sequential", answers["standard"])  # a baseline's exact schedule is its plain pass
        rows.append({"run": run_name(task, arm), "task": task, "arm": arm, "scratch_updates": scratch,
                     "gate": gate.gate.name, "gate_condition": GATE_CONDITION[arm], "gate_value": gate.value,
                     "gated": gate.passed, "exact_ok": exact >= COMPETENT,
                     **{f"answer_{c}": v for c, v in answers.items()}})
    return pd.DataFrame(rows)


def probes(ctx: Context, table: pd.DataFrame, text_gated: bool, n: int = PROBE_N) -> pd.DataFrame:
    """Probe rows of every gated specimen (and of the text model when it passed its gate)."""
    jobs = [(r.run, r.arm, r.task, r.scratch_updates, "ascii") for r in table[table["gated"]].itertuples()]
    jobs += [("text_fbt", "text fbt", "delayed_memory", s, "bytes") for s in TEXT_SCRATCH if text_gated]
    frames = []
    for run, arm, task, scratch, tokenizer in tqdm(jobs, desc="probes", leave=False):
        frame = _probe(ctx.models[run], probe_task(task, scratch, tokenizer), n, PROBE_SEED)
        frames.append(frame.assign(run=run, arm=arm, scratch_updates=scratch))
    if not frames:
        return pd.DataFrame(columns=PROBE_COLUMNS)
    out = pd.concat(frames, ignore_index=True)
    # the twin's own interval joins the trained rows, for rule (b)
    key = ["run", "scratch_updates", "condition", "layer"]
    twin = out[out["model"] == "random init"].set_index(key)["accuracy_low"]
    out["twin_accuracy_low"] = twin.reindex(pd.MultiIndex.from_frame(out[key])).to_numpy()
    return out[PROBE_COLUMNS]


PROBE_COLUMNS = ["run", "arm", "task", "scratch_updates", "model", "condition", "layer", "n", "accuracy",
                 "accuracy_std", "accuracy_low", "accuracy_high", "control_accuracy", "selectivity", "majority",
                 "twin_accuracy", "twin_accuracy_low", "twin_selectivity", "twin_low", "twin_high", "upper_bound",
                 "upper_bound_low", "upper_bound_high", "twin_upper_bound"]


def analyze(ctx: Context) -> Outcome:
    from ...plots import layer0_comparison, specimen_gates

    table = specimens(ctx, max(32, int(GATE_N * min(1.0, ctx.scale))))
    table.to_csv(ctx.out / "specimens.csv", index=False)
    unigram = tasks.get("text", **TEXT_TASK).unigram_loss()
    text_eval = ctx.per_example["text_fbt"]
    text_loss = float(text_eval["nats"].sum() / text_eval["targets"].sum())
    text_gate = TEXT_GATE.check(unigram - text_loss)
    results = probes(ctx, table, text_gate.passed, max(64, int(PROBE_N * min(1.0, ctx.scale))))
    trained0 = results[(results["model"] == "trained") & (results["layer"] == 0)]
    fbt0 = trained0[trained0["arm"] == "fbt"]
    lifts = {arm: {f"{prefix or r['task']} s{r['scratch_updates']}": lift_source(r)
                   for _, r in trained0[(trained0["arm"] == name) & (trained0["condition"] == "suffix1")].iterrows()}
             for arm, name, prefix in (("fbt", "fbt", None), ("lrt", "lrt", None), ("text", "text fbt", "text"))}
    fbt_gated = table[table["arm"] == "fbt"]["gated"]
    gate_values = {GATED_FBT: float(fbt_gated.sum())}
    verdict = (f"{claim_verdict(fbt0)} (over the {int(fbt_gated.sum())} of {len(fbt_gated)} FBT specimens that "
               "passed their gate)")
    figure = (layer0_comparison(trained0.assign(model=trained0["arm"])) if not trained0.empty
              else specimen_gates(table, COMPETENT))
    return Outcome(results, figure, _number(table, trained0, lifts, text_gate), verdict, gate_values,
                   chance="the majority label of each task (balanced by construction: 0.5), and the untrained twin",
                   extra={"specimens": json.loads(table.to_json(orient="records")), "lift_source": lifts["fbt"],
                          "lrt_lift_source": lifts["lrt"], "text_lift_source": lifts["text"],
                          "text_gate": {"name": text_gate.gate.name, "value": text_gate.value,
                                        "passed": text_gate.passed, "unigram": unigram, "loss": text_loss}})


def _lift(rows: pd.DataFrame, label: str, lift: str) -> str:
    """One specimen's layer-0 numbers in words: standard -> suffix1 with its interval, twin, upper bound."""
    rows = rows.set_index("condition")
    s1 = rows.loc["suffix1"]
    return (f"{label}: layer-0 standard {rows.loc['standard', 'accuracy']:.3f} -> suffix1 {s1['accuracy']:.3f} "
            f"[{s1['accuracy_low']:.3f}, {s1['accuracy_high']:.3f}], twin {s1['twin_accuracy']:.3f}, "
            f"upper bound {s1['upper_bound']:.3f}, lift {lift}")


def _number(specimens: pd.DataFrame, trained0: pd.DataFrame, lifts: dict[str, dict[str, str]],
            text_gate: GateResult) -> str:
    parts = []
    for r in specimens[specimens["arm"].isin(FEEDBACK_ARMS)].itertuples():
        key, arm = f"{r.task} s{r.scratch_updates}", r.arm.upper()
        if not r.gated:
            parts.append(f"{arm} {key}: missed its gate (answer accuracy {r.gate_value:.3f} < {COMPETENT})")
            continue
        rows = trained0[(trained0["arm"] == r.arm) & (trained0["task"] == r.task)
                        & (trained0["scratch_updates"] == r.scratch_updates)]
        parts.append(_lift(rows, f"{arm} {key}", lifts[r.arm][key])
                     + ("" if r.exact_ok else f"; exact answer accuracy {r.answer_sequential:.3f}: unfit for SOFT"))
    if text_gate.passed:
        text0 = trained0[trained0["arm"] == "text fbt"]
        parts += [_lift(text0[text0["scratch_updates"] == s], f"text FBT on delayed_memory s{s}",
                        lifts["text"][f"text s{s}"]) for s in TEXT_SCRATCH]
    else:
        parts.append(f"text FBT not probed: {text_gate.describe()}")
    return "; ".join(parts)


PAPER_TASKS = ("completion_tracking", "delayed_memory")  # the tasks the paper's two numbers are about


def finding(summary: dict, results: pd.DataFrame) -> Finding:
    """The layer-0 lift after one step on the gated FBT specimens, the paper's two tasks apart, beside the
    untrained twin and what the same specimens answer under the exact recurrence."""
    rows = results[(results["model"] == "trained") & (results["arm"] == "fbt") & (results["layer"] == 0)
                   & (results["condition"] == "suffix1")]
    gated = [s for s in summary["specimens"] if s["arm"] == "fbt" and s["gated"]]
    if rows.empty or not gated:
        return default_finding(summary, results)
    worst = rows.loc[rows["accuracy"].idxmin()]
    paper = rows[rows["task"].isin(PAPER_TASKS)]
    exact = max(s["answer_sequential"] for s in gated)
    return Finding(f"layer-0 accuracy after one step {rows['accuracy'].min():.3f}-{rows['accuracy'].max():.3f} "
                   f"(paper's tasks: {paper['accuracy'].min():.3f}-{paper['accuracy'].max():.3f})",
                   lead(summary) + f" One recurrent step lifts the label's layer-0 probe accuracy from chance to "
                   f"{rows['accuracy'].min():.3f}-{rows['accuracy'].max():.3f} on the {len(gated)} competent FBT "
                   f"specimens; the lowest is {worst['task']} at {worst['scratch_updates']} scratch lines, and on the "
                   f"paper's two tasks alone it is {paper['accuracy'].min():.3f}. An untrained twin of the same "
                   f"architecture reads {rows['twin_accuracy'].min():.3f}-{rows['twin_accuracy'].max():.3f}, so much "
                   f"of the lift comes with the architecture, and none of these specimens answers above {exact:.3f} "
                   "under its own exact recurrence.")


RECIPE = Recipe(
    "layer0_probes",
    "Under standard prefill the label is near chance at layer 0; one recurrent step lifts it to 99.6 % "
    "(completion tracking) and 100 % (delayed memory) (FBT, arXiv 2608.08888, appendix F).",
    f"Baseline {MODEL['n_layer']}x{MODEL['n_embd']}, FBT {FBT_MODEL['n_layer']}x{FBT_MODEL['n_embd']} (75/22/3 from "
    f"20 %) and LRT {MODEL['n_layer']}x{MODEL['n_embd']} (interleaved) per appendix-F task, {ARM_STEPS['baseline']} / "
    f"{ARM_STEPS['fbt']} / {ARM_STEPS['lrt']} steps of 32 (delayed_memory: a quarter; budget "
    f"{BUDGET_MINUTES:.0f} wall minutes on 2 cores), trained on 0/8/32 scratch "
    f"lines (one length per batch), each length gated; probes at the label-predicting position, every depth, "
    f"{PROBE_N} examples, grouped 4-fold CV, control task, untrained twin, fed-back upper bound; a byte-level FBT "
    "text model (never trained on the tasks) as a second arm.",
    build, analyze,
    gates=(Gate(GATED_FBT, f"FBT specimens (task x scratch length) whose held-out answer accuracy under suffix1 "
                           f"is >= {COMPETENT}; rule (a) reads these; each specimen's own gate is in specimens.csv",
                ">=", 1),),
    rule=RULE,
    chance="the majority label of each task (0.5, balanced by construction) and the untrained twin.",
    caveat="Decodability is not use: a probe shows the label is linearly present at layer 0, not that the model "
           "reads it there. The untrained twin shows how much of a lift the architecture gives for free.",
    paper="One recurrent step lifts the label at layer 0 from chance to 99.6 % / 100 % (FBT, appendix F)",
    finding=finding)


def explorer_compute(results: pd.DataFrame):
    """``(keys, compute)`` for ``widgets.probe_explorer`` over the recorded probes: each key is one
    task at one scratch length; ``compute(key, condition)`` returns its trained specimens' rows
    (labelled by arm), so the explorer browses the recipe's numbers without probing again."""
    trained = results[results["model"] == "trained"]
    keys = {f"{t} / {s} scratch lines": (t, s) for t, s in trained[["task", "scratch_updates"]].drop_duplicates()
            .itertuples(index=False)}

    def compute(key: str, condition: str) -> pd.DataFrame:
        if key not in keys:
            raise ValueError(f"key={key!r} is invalid: must be one of {list(keys)}")
        task, scratch = keys[key]
        rows = trained[(trained["task"] == task) & (trained["scratch_updates"] == scratch)
                       & (trained["condition"] == condition)]
        return rows.assign(model=rows["arm"]).reset_index(drop=True)

    return list(keys), compute

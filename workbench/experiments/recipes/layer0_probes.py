"""Layer-0 accessibility of the fed-back state (FBT paper, arXiv 2608.08888, appendix F)."""

from __future__ import annotations

import pandas as pd
from tqdm.auto import tqdm

from ... import tasks
from ..common import EXACT, FBT_MIX, FBT_MODEL, SMALL_MODEL, config, steps
from ..core import EVAL_SEED, Context, Gate, Outcome, Recipe, RunSpec

PROBE_TASKS = ("completion_tracking", "delayed_memory", "multi_register")
COMPETENT = 0.95  # held-out answer accuracy a specimen needs before it is probed
LIFT = 0.95  # layer-0 accuracy after one recurrent step that the paper's claim needs
NEAR_MAJORITY = 0.05


def build(scale: float) -> list[RunSpec]:
    runs = []
    for task in PROBE_TASKS:
        runs.append(RunSpec(f"{task}_baseline", config(task, {**SMALL_MODEL, "tie_embeddings": True},
                                                       steps(300, scale), 0), {"schedule": "single"}))
        runs.append(RunSpec(f"{task}_fbt", config(task, FBT_MODEL, steps(300, scale), 0, schedule="multipass",
                                                  pass_mix=FBT_MIX, passes=3, feedback_start=0.3, prefix_mixin=0.5),
                            EXACT))
    return runs


def analyze(ctx: Context) -> Outcome:
    from ...analysis.probes import probe_layers
    from ...plots import layer0_comparison

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
    fbt = layer0[layer0["run"].str.endswith("_fbt")].set_index(["task", "condition"])
    acc, majority = fbt["accuracy"], fbt["majority"]
    number = "; ".join(f"{t}: layer-0 acc standard {acc[(t, 'standard')]:.2f} -> suffix1 {acc[(t, 'suffix1')]:.2f}"
                       for t in PROBE_TASKS)
    lifted = all(acc[(t, "suffix1")] >= LIFT and abs(acc[(t, "standard")] - majority[(t, "standard")])
                 <= NEAR_MAJORITY for t in PROBE_TASKS)
    result = ("reproduces" if lifted else "does not reproduce" if any(acc[(t, "suffix1")] < 0.8 for t in PROBE_TASKS)
              else "inconclusive")
    gates = {f"{name} answer accuracy": float(ctx.per_example[name]["answer_correct"].mean()) for name in ctx.runs}
    return Outcome(table, layer0_comparison(layer0), number, result, gates,
                   chance="the majority label of each task (the probe's trivial baseline)")


RECIPE = Recipe(
    "layer0_probes",
    "Under standard prefill the label is near chance at layer 0; one recurrent step lifts it to 99.6 % "
    "(completion tracking) and 100 % (delayed memory).",
    "Baseline and FBT 2x64 trained 300 steps on each appendix-F task (8 scratch updates); linear probes at the "
    "final colon, 400 examples.",
    build, analyze,
    gates=tuple(Gate(f"{task}_{arm} answer accuracy", f"held-out answer accuracy under the run's evaluation "
                     f"schedule ({'exact sequential' if arm == 'fbt' else 'single pass'})", ">=", COMPETENT)
                for task in PROBE_TASKS for arm in ("baseline", "fbt")),
    rule=f"reproduces when every FBT specimen's layer-0 accuracy after one recurrent step is >= {LIFT} while "
         f"standard prefill stays within {NEAR_MAJORITY} of majority; does not reproduce when one lies below 0.8; "
         "inconclusive otherwise; not tested when a gate fails.",
    chance="the majority label of each task.",
    caveat="A probe can only find state the model computes, and decodability is not use.")

"""What makes a fed-back fixed point readable? A designed study (ours, beyond both papers).

``fbt_pass_mixes_registers``' FBTs answer at pass 2 but fail under their exact recurrence though their map contracts;
the LRT trained alike reads its fixed point. Families of arms, each vs its family's first (the additive fusion, ours,
keeps the token on the value path as LRT does). Not run (budget): truncated BPTT."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from ... import schedules, tasks
from ...analysis.fixed_point import example_scores, fixed_point_quality, iterate_geometry, residual_behaviour
from ...analysis.jacobians import lyapunov
from ...checkpoint import load_metrics
from ...evaluation import hierarchical_difference
from ...model import GPT, eval_mode
from ...schedules import FixedPoint, PassMix, Sequential
from ..common import FBT_MIX, config, eval_size, steps
from ..core import EVAL_SEED, Context, Finding, Gate, Outcome, Recipe, RunSpec, lead, preregistered
from ..pass_mix_study import AUX_WEIGHT, BATCH, FEEDBACK_START, PREFIX_MIXIN, REGISTERS
from ..pass_mix_study import STEPS as SCRATCH_STEPS  # the registers recipe's setting and training, from scratch

LONG = {**REGISTERS, "scratch_updates": 128}  # T > 1,000: the extrapolation setting
SHAPE = {"n_layer": 1, "n_head": 2, "n_embd": 64}
FBT_GLU = {**SHAPE, "mechanism": "fbt"}
LRT = {**SHAPE, "mechanism": "lrt", "lrt_gamma_init": 0.1, "lrt_kv_init": "uniform"}
FINETUNE_STEPS, FINETUNE_LR = 1500, 3e-4
SEEDS = (0, 1)
FBT_ADDITIVE = {**FBT_GLU, "fbt_fusion": "additive"}
# run names: the registers recipe's (its seed-0 LRT has no seed suffix)
SHIPPED = {"fbt_glu": "reg_75_22_3_s{s}", "lrt": "reg_lrt_75_22_3{suffix}", "fbt_additive": "reg_add_75_22_3_s{s}",
           "fbt_glu_phased": "reg_phased_97_3_s{s}"}
# the specimens the fine-tunes start from, relative to the repository root
SPECIMEN = "checkpoints/fbt_pass_mixes_registers/reg_75_22_3_s{seed}"
ADDITIVE_SPECIMEN = "checkpoints/fixed_point_study/reg_add_75_22_3_s{seed}"
FINETUNE_SEED = 100  # fine-tunes draw fresh batches: seed 100 + s, not the stream the specimen trained on

# The first arm of each family is its reference. The phased mix reads the paper's "a small fraction (e.g. 3 %)" of
# 3-pass batches after the plain phase; the phased fine-tune arm keeps the recipe's 22:3 ratio instead.
PHASED_MIX = {2: 0.97, 3: 0.03}
SCRATCH_ARMS = {"fbt_glu": (FBT_GLU, FBT_MIX), "lrt": (LRT, FBT_MIX), "fbt_additive": (FBT_ADDITIVE, FBT_MIX),
                "fbt_glu_phased": (FBT_GLU, PHASED_MIX)}
TRAINING_ARMS = {
    "ft_mix": {"pass_mix": FBT_MIX},
    "ft_share_50_25_25": {"pass_mix": {1: 0.5, 2: 0.25, 3: 0.25}},
    "ft_random_1_8": {"pass_mix": {k: 1 / 8 for k in range(1, 9)}},
    "ft_phased_88_12": {"pass_mix": {2: 0.88, 3: 0.12}},
    "ft_jitter_0.2": {"pass_mix": FBT_MIX, "fbt_jitter": 0.2},
    "ft_fixed_point": {"fixed_point": FixedPoint(40)},
    "ft_additive": {"pass_mix": FBT_MIX, "fbt_fusion": "additive"},
    "ft_sequential": {"sequential": True},
}
# the arm that helped most after FINETUNE_STEPS, still rising over its last quarter, three times as long
DURATION_STEPS = 3 * FINETUNE_STEPS
DURATION_ARMS = {f"ft_mix_{DURATION_STEPS}": TRAINING_ARMS["ft_mix"],
                 f"ft_fixed_point_{DURATION_STEPS}": TRAINING_ARMS["ft_fixed_point"]}
ADDITIVE_ARMS = {"add_ft_mix": {**TRAINING_ARMS["ft_mix"], "fbt_fusion": "additive"},
                 "add_ft_fixed_point": {**TRAINING_ARMS["ft_fixed_point"], "fbt_fusion": "additive"},
                 "add_ft_random_1_8": {**TRAINING_ARMS["ft_random_1_8"], "fbt_fusion": "additive"}}
# Long: a length curriculum, because 1,000 steps on 128 lines alone (batch 8) left every depth at chance on them
# (0.50-0.56 on 32 prompts): the shorter lengths teach the lookup the long one needs.
LONG_STEPS, LONG_BATCH = 1000, 8
LONG_CURRICULUM = {**REGISTERS, "scratch_updates": [8, 32, 128], "scratch_draw": "batch"}
LONG_ARMS = {"long_mix": ADDITIVE_ARMS["add_ft_mix"], "long_random_1_8": ADDITIVE_ARMS["add_ft_random_1_8"]}
LONG_SPECIMEN = "checkpoints/fixed_point_study/add_ft_random_1_8_s{seed}"


@dataclass(frozen=True)
class Family:
    """A fine-tune family; its first arm is its reference."""

    arms: dict[str, dict]
    steps: int
    specimen: str
    setting: dict = field(default_factory=lambda: REGISTERS)
    batch: int = BATCH
    scored_on: dict | None = None


FAMILY_ARMS = {"training": Family(TRAINING_ARMS, FINETUNE_STEPS, SPECIMEN),
               "duration": Family(DURATION_ARMS, DURATION_STEPS, SPECIMEN),
               "additive": Family(ADDITIVE_ARMS, FINETUNE_STEPS, ADDITIVE_SPECIMEN),
               "long": Family(LONG_ARMS, LONG_STEPS, LONG_SPECIMEN, LONG_CURRICULUM, LONG_BATCH, LONG)}
REFERENCE = {"scratch": "fbt_glu", **{family: next(iter(f.arms)) for family, f in FAMILY_ARMS.items()}}

READABLE = 0.95  # exact-recurrence answer accuracy a readable fixed point reaches, every seed
NEEDS_FEEDBACK = 0.9  # the reference's pass-1 answer accuracy must stay below this: the feedback is needed
TRAINED_DEPTH = 0.95  # ... and its pass-2 answer accuracy at least this: it uses its feedback where trained
# long prompts: passes 1-2 and the exact recurrence on LONG_EXAMPLES, 1,000 fused passes on the first LONG_FUSED
DYNAMICS_EXAMPLES, LONG_EXAMPLES, LONG_FUSED, LONG_PASSES = 64, 64, 16, 1000


def _scratch_run(arm: str, model: dict, mix: dict[int, float], seed: int, scale: float) -> RunSpec:
    """The registers recipe's run under its own name, so a shipped specimen is reused."""
    cfg = config("multi_register", model, steps(SCRATCH_STEPS, scale), seed, REGISTERS,
                 schedule=PassMix.of(mix, AUX_WEIGHT, 3), feedback_start=FEEDBACK_START, prefix_mixin=PREFIX_MIXIN
                 ).replace(batch_size=BATCH)
    return RunSpec(SHIPPED[arm].format(s=seed, suffix=f"_s{seed}" if seed else ""), cfg, Sequential(),
                   eval_size(scale))


def _finetune_run(arm: str, change: dict, seed: int, family: Family, scale: float) -> RunSpec:
    model = {**FBT_GLU, **{k: change[k] for k in ("fbt_jitter", "fbt_fusion") if k in change}}
    if change.get("sequential"):  # the exact recurrence itself, backpropagated through every position
        schedule = {"schedule": Sequential(), "prefix_mixin": 0.0}
    elif "fixed_point" in change:
        schedule = {"schedule": change["fixed_point"], "prefix_mixin": 0.0}
    else:
        schedule = {"schedule": PassMix.of(change["pass_mix"], AUX_WEIGHT), "prefix_mixin": PREFIX_MIXIN}
    cfg = config("multi_register", model, steps(family.steps, scale), FINETUNE_SEED + seed, family.setting,
                 optimizer="adamw", lr=FINETUNE_LR, lr_schedule="constant",
                 init_from=family.specimen.format(seed=seed), **schedule).replace(batch_size=family.batch)
    return RunSpec(f"{arm}_s{seed}", cfg, Sequential(), eval_size(scale), eval_task_params=family.scored_on)


def build(scale: float) -> list[RunSpec]:
    runs = [_scratch_run(arm, model, mix, s, scale)
            for arm, (model, mix) in SCRATCH_ARMS.items() for s in SEEDS]
    runs += [_finetune_run(arm, change, s, family, scale)
             for family in FAMILY_ARMS.values() for arm, change in family.arms.items() for s in SEEDS]
    return runs


def arm_of(spec: RunSpec) -> tuple[str, str]:
    """(family, arm) of a run, from its name."""
    for family, group in FAMILY_ARMS.items():
        for arm in group.arms:
            if spec.name.startswith(arm + "_s"):
                return family, arm
    return "scratch", next(arm for arm, name in SHIPPED.items() if spec.name.startswith(name.split("{")[0]))


def decide(arm: str, accuracies: list[float], interval: dict[str, float]) -> str:
    """The rule for one arm against its family's reference."""
    if min(accuracies) >= READABLE and interval["low"] > 0:
        return "makes the fixed point readable"
    if interval["low"] > 0:
        return "helps, not readable"
    if interval["high"] < 0:
        return "hurts"
    if interval["low"] == interval["high"]:  # every resample the same: both arms score alike on every prompt
        return "no effect detected (degenerate: a zero-width interval, the arms agree on every prompt)"
    return "no effect detected"


def competence(rows: pd.DataFrame, arm: str, reference: bool, where: str = "") -> str | None:
    """Why the runs cannot test reading a fed-back fixed point, or None; only a reference must answer at pass 2."""
    pass1, pass2 = rows[f"{where}accuracy_pass1"], rows[f"{where}accuracy_pass2"]
    prompts = " on the long prompts" if where else ""
    if pass1.max() >= NEEDS_FEEDBACK:
        return f"{arm} answers without its feedback{prompts} (pass-1 accuracy {pass1.max():.3f})"
    if reference and pass2.min() < TRAINED_DEPTH:
        return f"{arm} does not answer at its trained depth{prompts} (pass-2 accuracy {pass2.min():.3f})"
    return None


def specimen_runs(table: pd.DataFrame, long_exact: dict[str, float]) -> list[str]:
    """Runs that need their feedback and read their fixed point at both lengths."""
    ok = table.assign(long_exact=table["run"].map(long_exact).fillna(table["long_accuracy_exact"]))
    ok = ok[(ok[["accuracy_pass1", "long_accuracy_pass1"]].max(axis=1, skipna=False) < NEEDS_FEEDBACK)
            & (ok[["accuracy_exact", "long_exact", "long_accuracy_fused"]].min(axis=1, skipna=False) >= READABLE)]
    return ok["run"].tolist()


def _accuracy_interval(correct: np.ndarray, seed: int = 0, n: int = 2000) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    means = rng.choice(correct.astype(np.float64), size=(n, len(correct))).mean(1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def readability_table(model: GPT, batch: tasks.Batch, dynamics_examples: int = 64, readable: float = 0.95,
                      long_batch: tasks.Batch | None = None, long_passes: int = 1000,
                      lyapunov_examples: int = 8, window_passes: int | None = None,
                      lyapunov_from: int | None = None, long_fused_examples: int | None = None) -> pd.DataFrame:
    """One study row for ``model``. Long-prompt exact/fused columns stay NaN unless exact here and pass 2 there
    reach ``readable``: else they would measure length generalisation, not the fixed point."""
    idx, targets = batch.tokens, batch.targets
    T = idx.size(1)
    quality = fixed_point_quality(model, idx, targets, 3).per_example
    by = quality.groupby(["schedule", "pass"], dropna=False)[["loss", "correct"]].mean()
    row: dict[str, float | str] = {}
    for k in (1, 2, 3):
        row[f"loss_pass{k}"], row[f"accuracy_pass{k}"] = by.loc[("multipass", k)].tolist()
    exact = quality[quality["schedule"] == "sequential"]
    row["loss_exact"], row["accuracy_exact"] = float(exact["loss"].mean()), float(exact["correct"].mean())
    row["accuracy_exact_low"], row["accuracy_exact_high"] = _accuracy_interval(exact["correct"].to_numpy())
    row["distance_pass3"] = float(quality.loc[quality["pass"] == 3, "distance"].mean())
    window = (3 * T) // 4 if window_passes is None else window_passes
    geo = iterate_geometry(model, idx[:dynamics_examples], window, targets[:dynamics_examples])
    row["residual_last"] = float(geo.per_pass["residual"].iloc[-1])
    row["residual_behaviour"] = residual_behaviour(geo.per_pass["residual"].iloc[2:].tolist())
    exps = lyapunov(model, idx[:lyapunov_examples], t0=T // 2 if lyapunov_from is None else lyapunov_from)
    final = exps[exps["horizon"] == exps["horizon"].max()]["exponent"]
    row["lyapunov_top"], row["lyapunov_min"], row["lyapunov_max"] = (float(final.mean()), float(final.min()),
                                                                     float(final.max()))
    for column in ("long_accuracy_pass1", "long_accuracy_pass2", "long_accuracy_exact", "long_accuracy_fused"):
        row[column] = math.nan
    if long_batch is None:
        return pd.DataFrame([row])
    tokens, targets = long_batch.tokens, long_batch.targets
    with torch.no_grad(), eval_mode(model):  # the trained depth first: a model that cannot answer there is no test
        for k, out in enumerate(schedules.iterate_passes(model, tokens, 0, 2), start=1):
            row[f"long_accuracy_pass{k}"] = float(example_scores(out.logits, targets)[1].mean())
    if min(row["accuracy_exact"], row["long_accuracy_pass2"]) >= readable:
        fused_tokens = tokens[:long_fused_examples]
        with torch.no_grad(), eval_mode(model):
            exact_long = schedules.Sequential().run(model, tokens)
            # only the last pass is kept: 1,000 passes of logits would not fit in memory
            fused = deque(schedules.iterate_passes(model, fused_tokens, 0, long_passes), maxlen=1)[0]
        row["long_accuracy_exact"] = float(example_scores(exact_long.logits, targets)[1].mean())
        row["long_accuracy_fused"] = float(example_scores(fused.logits, targets[:long_fused_examples])[1].mean())
    return pd.DataFrame([row])


def analyze(ctx: Context) -> Outcome:
    from ...plots import fixed_point_readability

    batch = next(iter(ctx.runs.values())).eval_batch()
    full = ctx.scale >= 1
    long_batch = tasks.get("multi_register", **LONG).sample(LONG_EXAMPLES if full else 2, seed=EVAL_SEED, split="val")
    T = batch.tokens.size(1)
    # a smoke run (the test suite's scale) measures the same quantities on fewer prompts and passes
    sizes = dict(dynamics_examples=DYNAMICS_EXAMPLES if full else 8, lyapunov_examples=8 if full else 2,
                 long_passes=LONG_PASSES if full else 8, window_passes=None if full else 12,
                 lyapunov_from=None if full else T - 9, long_fused_examples=LONG_FUSED if full else 1)
    frames = []
    for name, model in ctx.models.items():
        family, arm = arm_of(ctx.runs[name])
        per_run = readability_table(model, batch, readable=READABLE, long_batch=long_batch, **sizes)
        trained = load_metrics(ctx.out / name)["train"]
        frames.append(per_run.assign(run=name, family=family, arm=arm, seed=ctx.runs[name].train.seed % 100,
                                     steps=trained["step"], train_flops=trained["flops"]))
    table = pd.concat(frames, ignore_index=True)
    examples = {name: ctx.per_example[name]["answer_correct"].to_numpy(dtype=np.float64) for name in ctx.runs}
    rows, verdicts = [], {}
    for family, reference in REFERENCE.items():
        names = table[table["family"] == family].groupby("arm", sort=False)["run"].apply(list).to_dict()
        ref = [examples[n] for n in names[reference]]
        for i, (arm, runs) in enumerate(names.items()):
            accs = [float(examples[n].mean()) for n in runs]
            interval = hierarchical_difference(ref, [examples[n] for n in runs], seed=i) if arm != reference \
                else {"mean": 0.0, "low": 0.0, "high": 0.0, "seeds": len(runs)}
            where = "long_" if family == "long" else ""
            unfit = (competence(table[table["run"].isin(names[reference])], reference, True, where)
                     or competence(table[table["run"].isin(runs)], arm, False, where))
            verdict = "reference" if arm == reference else f"not tested: {unfit}" if unfit else decide(
                arm, accs, interval)
            verdicts[arm] = verdict
            rows.append({"family": family, "arm": arm, "seeds": len(runs), "exact_accuracy": float(np.mean(accs)),
                         "exact_accuracy_worst": min(accs), "diff_vs_reference": interval["mean"],
                         "ci_low": interval["low"], "ci_high": interval["high"], "verdict": verdict})
    arms = pd.DataFrame(rows)
    readable = [r.arm for r in arms.itertuples() if r.verdict == "makes the fixed point readable"]
    best = arms.sort_values("exact_accuracy_worst", ascending=False).iloc[0]
    verdict = (("readable with: " + ", ".join(readable)) if readable else
               f"no factor makes the fixed point readable (best {best.arm}: worst-seed exact accuracy "
               f"{best.exact_accuracy_worst:.3f} < {READABLE})")
    ref_rows = table[table["arm"] == REFERENCE["training"]]
    gates = {"reference needs feedback": float(ref_rows["accuracy_pass1"].max()),
             "reference uses feedback at its trained depth": float(ref_rows["accuracy_pass2"].min())}
    number = "; ".join(f"{r.arm}: exact accuracy {r.exact_accuracy:.3f} (worst seed {r.exact_accuracy_worst:.3f})"
                       + ("" if r.arm in REFERENCE.values() else
                          f", {r.diff_vs_reference:+.3f} [{r.ci_low:+.3f}, {r.ci_high:+.3f}] vs {REFERENCE[r.family]}")
                       for r in arms.itertuples())
    # the long family's exact accuracy is on its own 256 held-out long prompts (its evaluation); the others' long
    # exact column is the 64 analysed here
    long_exact = {n: float(examples[n].mean()) for n in table.loc[table["family"] == "long", "run"]}
    specimens = specimen_runs(table, long_exact)
    table.to_csv(ctx.out / "runs.csv", index=False)
    arms.to_csv(ctx.out / "arms.csv", index=False)
    return Outcome(table, lambda _: fixed_point_readability(table, readable=READABLE), number, verdict, gates,
                   chance="0.5: the answer is one of two balanced values",
                   extra={"arms": arms.to_dict(orient="records"), "readable_arms": readable, "specimen_runs": specimens,
                          "long_seq_len": int(long_batch.tokens.size(1))})


def finding(summary: dict, results: pd.DataFrame) -> Finding:
    """The mechanism arms' exact accuracy, and the FBT change that reads its fixed point best."""
    arms = pd.DataFrame(summary["arms"]).set_index("arm")
    fbt, lrt = arms.loc[REFERENCE["scratch"]], arms.loc["lrt"]
    changes = arms[(arms.index != "lrt") & (arms["verdict"] != "reference")]
    top = changes.sort_values("exact_accuracy_worst", ascending=False).iloc[0]
    return Finding(f"exact accuracy: LRT {lrt['exact_accuracy']:.3f}, FBT {fbt['exact_accuracy']:.3f}, best FBT "
                   f"change {top.name} {top['exact_accuracy']:.3f}",
                   lead(summary) or f"Under its own exact recurrence the LRT answers {lrt['exact_accuracy']:.3f} and "
                   f"FBT as trained {fbt['exact_accuracy']:.3f}; the FBT change that reads its fixed point best, "
                   f"{top.name}, answers {top['exact_accuracy']:.3f}, its worst seed {top['exact_accuracy_worst']:.3f} "
                   f"(readable: every seed >= {READABLE}).")


GATES = (Gate("reference needs feedback", f"pass-1 (STANDARD) answer accuracy of the {REFERENCE['training']} "
              "runs, best seed: the feedback is needed to answer", "<", NEEDS_FEEDBACK),
         Gate("reference uses feedback at its trained depth", f"pass-2 answer accuracy of the "
              f"{REFERENCE['training']} runs, worst seed", ">=", TRAINED_DEPTH))

_T = tasks.get("multi_register", **REGISTERS).seq_len
RECIPE = Recipe(
    "fixed_point_study", build=build, analyze=analyze, gates=GATES, kind="exploratory", finding=finding,
    **preregistered("fixed_point_study", T=_T, SCRATCH_STEPS=SCRATCH_STEPS, PHASED_MIX=PHASED_MIX,
                    FINETUNE_STEPS=FINETUNE_STEPS, DURATION_STEPS=DURATION_STEPS, LONG_STEPS=LONG_STEPS,
                    LONG_BATCH=LONG_BATCH, LONG_T=tasks.get("multi_register", **LONG).seq_len, REFERENCE=REFERENCE,
                    FAMILY_REFERENCES=", ".join(REFERENCE[f] for f in FAMILY_ARMS), READABLE=READABLE,
                    NEEDS_FEEDBACK=NEEDS_FEEDBACK, TRAINED_DEPTH=TRAINED_DEPTH))


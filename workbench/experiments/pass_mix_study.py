"""The FBT pass-mix study: the pass map iterated far past the training depth."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from .. import tasks
from ..evaluation import hierarchical_difference
from ..schedules import Multipass, PassMix
from .common import FBT_MIX, config, eval_size, steps
from .core import Context, Gate, Outcome, RunSpec, preregistered

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# One layer: the feedback is the only way a position sees its predecessor's top state, so a model
# that uses it must show pass 2 beating pass 1 (a deeper model can route around it).
MODEL = {"n_layer": 1, "n_head": 2, "n_embd": 64, "mechanism": "fbt"}

# The cross (beyond the paper): an LRT of the same shape trained under the same multipass mix and measured the
# same way; it reads as its own row, never in the FBT rule or gates.
LRT_MODEL = {"n_layer": 1, "n_head": 2, "n_embd": 64, "mechanism": "lrt", "lrt_gamma_init": 0.1,
             "lrt_kv_init": "uniform"}

CROSS_MIX = "75_22_3"

MIXES = {"1pass": {1: 1.0}, "75_25": {1: 0.75, 2: 0.25}, "75_22_3": FBT_MIX}

FEEDBACK_MIXES = ("75_25", "75_22_3")  # the two arms the decision rule compares

FEEDBACK_START = 0.2  # progressive schedule: the first 20 % of steps single-pass, then the mix

PREFIX_MIXIN = 0.5  # half the sequences of a multi-pass batch get a random plain prefix

BATCH = 16

LATE_PASS = 30  # "passes >= 30": the band the claim is about starts here

DYNAMICS_EXAMPLES = 16  # held-out sequences the pass map is iterated on (per-example losses for the rule)

JACOBIAN_EXAMPLES = 2
DECODE_EXAMPLES, DECODE_TOKENS = 4, 1000  # SOFT decoding far past the context: does the carried state stay bounded?


def mix_runs(prefix: str, task: str, task_params: dict, base_steps: int, scale: float,
             seeds: dict[str, tuple[int, ...]], aux_weight: float = 1.0, model: dict | None = None,
             batch: int = BATCH) -> list[RunSpec]:
    """One run per (mix, seed): progressive schedule, jitter, prefix mix-in."""
    runs, n_steps = [], steps(base_steps, scale)
    for name, mix_seeds in seeds.items():
        mix = MIXES[name]
        for seed in mix_seeds:
            feedback = len(mix) > 1
            cfg = config(task, model or MODEL, n_steps, seed, task_params, schedule=PassMix.of(mix, aux_weight),
                         feedback_start=FEEDBACK_START if feedback else 0.0,
                         prefix_mixin=PREFIX_MIXIN if feedback else 0.0
                         ).replace(batch_size=batch)
            suffix = f"_s{seed}" if len(mix_seeds) > 1 else ""
            runs.append(RunSpec(f"{prefix}{name}{suffix}", cfg, Multipass(2), eval_size(scale)))
    return runs


def is_fbt(spec: RunSpec) -> bool:
    return spec.train.model.get("mechanism") == "fbt"


SEEDS = (0, 1)  # per mix: the rule's interval is over seeds, then examples


# Two registers written once each, their write lines shuffled among the scratch lines (``scratch_layout``), so no
# write sits at a fixed offset a head could read by position.
REGISTERS = {"registers": 2, "writes": 1, "scratch_updates": 8, "scratch_layout": "shuffled"}
AUX_WEIGHT = 3.0  # lambda of NTP_1 + lambda * NTP_k>=2: a feedback batch comes 1 in 4, so its loss weighs 3x
# Why this setting (fbt_pass_mixes_registers; measured, 75/22/3, label loss on 512 held-out prompts, pass 1 / pass 2):
# - The paper's block layout (every write line first) with 2 registers x 2 writes: a 2x64 model (4,000 steps)
#   answers in one pass (0.013 / 0.354), and so does a 1x64 model with 4 heads (6,000 steps: 0.006 / 0.075):
#   the writes sit at fixed offsets, so enough heads read them by position, no feedback needed. With 1x64 and 2
#   heads, 6,000 steps put pass 2 at ln 2 / 2 = 0.347 for both feedback mixes: exactly one prompt of each group
#   answered, its mate at chance, below the chance-margin gate. 4 registers x 1 write was not learned (0.538 /
#   0.546 at 6,000 steps).
# - Shuffled writes, 1x64, 2 heads: with 2 writes 6,000 steps give 0.560 / 0.480 (4 heads: 0.364 / 0.431, one
#   pass still better); with 1 write 6,000 steps give 0.491 / 0.450 and 20,000 steps (9.6 minutes, 1 thread)
#   0.375 / 0.0002: the pass-1 model answers half the prompts, the feedback answers all of them.
STEPS = 28000


def registers_runs(scale: float) -> list[RunSpec]:
    """Every mix and the LRT cross (``CROSS_MIX`` on an LRT of the same shape); ``fixed_point_study`` reuses them."""
    return [*mix_runs("reg_", "multi_register", REGISTERS, STEPS, scale, {m: SEEDS for m in MIXES}, AUX_WEIGHT),
            *mix_runs("reg_lrt_", "multi_register", REGISTERS, STEPS, scale, {CROSS_MIX: (0,)}, AUX_WEIGHT, LRT_MODEL)]


@dataclass(frozen=True)
class Setting:
    """What the two settings measure differently."""

    name: str  # "text" or "registers", in figure titles and the table
    targets: Callable[[tasks.Batch], torch.Tensor]  # (B, T) the claim's targets of a batch, -1 elsewhere
    baseline: float  # the context-free loss every gated model must beat
    baseline_name: str
    margin: float  # ... by this much (nats per target)
    gated_mixes: tuple[str, ...]  # the mixes whose "below baseline" gate applies
    prompt_len: Callable[[tasks.Batch], int]  # where SOFT decoding starts writing
    accuracy: bool = True  # whether "every target right" means something (one label: yes; a text window: no)


def label_targets(batch: tasks.Batch) -> torch.Tensor:
    """Only the label's target."""
    targets = torch.full_like(batch.targets, -1)
    rows = torch.arange(batch.targets.size(0))
    where = batch.label_positions + 1
    targets[rows, where] = batch.targets[rows, where]
    return targets


def mix_of(spec: RunSpec) -> str:
    return next(name for name, mix in MIXES.items() if mix == dict(spec.train.schedule.mix))


@torch.no_grad()
def pass_losses(model, tokens: torch.Tensor, targets: torch.Tensor, passes: int, chunk: int = 64) -> np.ndarray:
    """(passes, B) mean loss over ``targets`` after each Jacobi pass (eval mode)."""
    from ..analysis.fixed_point import window_loss
    from ..model import eval_mode
    from ..schedules import iterate_passes

    out = []
    with eval_mode(model):
        for start in range(0, tokens.size(0), chunk):
            part = slice(start, start + chunk)
            out.append([window_loss(o.logits, targets[part])[1]
                        for o in iterate_passes(model, tokens[part], 0, passes)])
    return np.concatenate([np.asarray(x) for x in out], axis=1)


def window(T: int) -> int:
    """First measured position: passes 1..W never make positions >= W exact by causality."""
    return (3 * T) // 4


def residual_ends(delta: pd.Series) -> tuple[float, float]:
    """The residual at pass 3 and its median over the last tenth."""
    values = delta.to_numpy()
    return float(values[2]), float(np.median(values[-max(2, len(values) // 10):]))


def rise_interval(per_seed_rise: list[np.ndarray], seed: int) -> dict[str, float]:
    """Late-pass loss minus pass 2's: hierarchical interval, paired in a model."""
    return hierarchical_difference([np.zeros_like(r) for r in per_seed_rise], per_seed_rise, seed=seed)


DECAYS = ("decays to zero", "decays to a plateau")  # residual behaviours that do not diverge


def loss_half(rises: dict[str, dict[str, float]]) -> str:
    """The claim's loss half (``RULE``)."""
    up = {m: rises[m]["low"] > 0 for m in FEEDBACK_MIXES}
    if up["75_25"] and not up["75_22_3"]:
        return "reproduces"
    if up["75_25"] == up["75_22_3"]:
        return "does not reproduce"
    return "inconclusive"


def residual_half(behaviours: dict[str, list[str]]) -> str:
    """The claim's residual half (``RULE``)."""
    b25, b223 = behaviours["75_25"], behaviours["75_22_3"]
    if not b25 or not b223:
        return "not tested: no run of a feedback mix"
    if all(b not in DECAYS for b in b25) and all(b in DECAYS for b in b223):
        return "reproduces"
    if all(b in DECAYS for b in b25) or all(b not in DECAYS for b in b223):
        return "does not reproduce"
    return "inconclusive"


def decide(rises: dict[str, dict[str, float]], behaviours: dict[str, list[str]]) -> str:
    """``RULE``: each half, then the claim."""
    halves = {"loss": loss_half(rises), "residual": residual_half(behaviours)}
    if all(v == "reproduces" for v in halves.values()):
        overall = "reproduces"
    elif any(v == "does not reproduce" for v in halves.values()):
        overall = "does not reproduce"
    else:
        overall = "inconclusive"
    return f"{overall} (loss half: {halves['loss']}; residual half: {halves['residual']})"


def fixed_point_row(model, batch: tasks.Batch, targets: torch.Tensor, accuracy: bool) -> dict[str, float]:
    """The exact recurrence's loss and accuracy against the best trained pass."""
    from ..analysis.fixed_point import fixed_point_quality

    per = fixed_point_quality(model, batch.tokens, targets, passes=3).per_example
    by = per.groupby(per["pass"].fillna(0).astype(int))[["loss", "correct"]].mean()  # pass 0: the exact recurrence
    best = int(by.loc[[1, 2, 3], "loss"].idxmin())
    nan = float("nan")
    return {"exact_loss": float(by.loc[0, "loss"]), "exact_accuracy": float(by.loc[0, "correct"]) if accuracy else nan,
            "best_pass": best, "best_pass_loss": float(by.loc[best, "loss"]),
            "best_pass_accuracy": float(by.loc[best, "correct"]) if accuracy else nan}


def analyze_mixes(ctx: Context, setting: Setting) -> Outcome:
    """Iterate every pass map over the window, then gate and rule."""
    from ..analysis.fixed_point import pass_dynamics, residual_behaviour
    from ..analysis.jacobians import jacobian_norm, pass_map_jacobian, sensitivity
    from ..analysis.trajectory import decoding_states

    batch = next(iter(ctx.runs.values())).eval_batch()
    targets = setting.targets(batch)
    T = batch.tokens.size(1)
    W = window(T)
    full = ctx.scale >= 1  # below full scale (the test suite's smoke runs) every costly measurement is cut short
    passes = W if full else min(W, LATE_PASS + 4)
    decode_tokens, map_iters, step_iters = (DECODE_TOKENS, 20, 30) if full else (16, 3, 3)
    idx, claim = batch.tokens[:DYNAMICS_EXAMPLES], targets[:DYNAMICS_EXAMPLES]
    frames, rows, sens, decoded, per_seed_rise = {}, [], [], [], {m: [] for m in FEEDBACK_MIXES}
    for name, model in tqdm(ctx.models.items(), desc="pass dynamics", leave=False):
        spec, mix = ctx.runs[name], mix_of(ctx.runs[name])
        mechanism = spec.train.model.get("mechanism", "none")
        dyn = pass_dynamics(model, idx, passes=passes, targets=claim, from_position=W, keep_examples=True)
        frames[name] = dyn
        by_pass = dyn.set_index("pass")
        examples = np.asarray(by_pass["example_loss"].tolist())  # (passes, B)
        late = examples[LATE_PASS - 1:].mean(0)
        if mix in per_seed_rise and is_fbt(spec):
            per_seed_rise[mix].append(late - examples[1])
        held = pass_losses(model, batch.tokens, targets, 2).mean(1)  # the gates: the whole held-out batch
        early, late_delta = residual_ends(by_pass["delta"])
        effect = sensitivity(model, idx[:4], t0=T // 4).assign(run=name)
        sens.append(effect)
        states = decoding_states(model, idx[:DECODE_EXAMPLES, :setting.prompt_len(batch)], decode_tokens)
        decoded.append(states.assign(run=name))
        written = states[states["generated"]]
        rows.append({"run": name, "mechanism": mechanism, "mix": mix, "seed": spec.train.seed,
                     "setting": setting.name, "T": T, "late_rise": float((late - examples[1]).mean()),
                     "from_position": W, "passes": passes, "trained_depth": max(MIXES[mix]),
                     "heldout_loss_pass1": float(held[0]), "heldout_loss_pass2": float(held[1]),
                     **{f"loss_pass{k}": float(by_pass.loc[k, "loss"]) for k in (1, 2, 3, LATE_PASS)},
                     "loss_last": float(by_pass.loc[passes, "loss"]), "loss_late_mean": float(late.mean()),
                     "residual_pass3": early, "residual_late": late_delta,
                     "residual_last": float(by_pass.loc[passes, "delta"]),
                     "residual_behaviour": residual_behaviour(by_pass["delta"].iloc[2:].tolist()),
                     **fixed_point_row(model, batch, targets, setting.accuracy),
                     "rate_median": float(by_pass["contraction_rate"].median()),
                     "exact_by_causality": float(by_pass["exact_by_causality"].max()),
                     "jacobian_pass_map": float(pass_map_jacobian(model, idx[:JACOBIAN_EXAMPLES],
                                                                  iters=map_iters)["norm"]),
                     "jacobian_one_step": jacobian_norm(model, idx[:JACOBIAN_EXAMPLES], t=T - 4, iters=step_iters),
                     "sensitivity_last": float(effect["effect"].iloc[-1]),
                     "sensitivity_max": float(effect["effect"].max()),
                     "soft_state_prompt": float(states.loc[~states["generated"], "state_norm_mean"].mean()),
                     "soft_state_generated_max": float(written["state_norm_max"].max()),
                     "soft_state_last100": float(written["state_norm_mean"].iloc[-100:].mean())})
    table = pd.DataFrame(rows)
    stacked = pd.concat([f.drop(columns="example_loss").assign(run=n) for n, f in frames.items()])
    stacked.to_csv(ctx.out / "pass_dynamics.csv", index=False)
    pd.concat(sens, ignore_index=True).to_csv(ctx.out / "sensitivity.csv", index=False)
    pd.concat(decoded, ignore_index=True).to_csv(ctx.out / "decoding.csv", index=False)
    rises = {m: rise_interval(per_seed_rise[m], i) for i, m in enumerate(FEEDBACK_MIXES)}
    fbt = table[table["mechanism"] == "fbt"]
    behaviours = {m: fbt.loc[fbt["mix"] == m, "residual_behaviour"].tolist() for m in FEEDBACK_MIXES}
    verdict = decide(rises, behaviours)
    gates = {"positions exact by causality": float(table["exact_by_causality"].max())}
    for mix, group in fbt.groupby("mix", sort=False):
        if mix in FEEDBACK_MIXES:
            gates[f"{mix} uses feedback"] = float((group["heldout_loss_pass2"] - group["heldout_loss_pass1"]).max())
        if mix in setting.gated_mixes:
            best = group[["heldout_loss_pass1", "heldout_loss_pass2"]].min(axis=1) if mix != "1pass" \
                else group["heldout_loss_pass1"]
            gates[f"{mix} below {setting.baseline_name}"] = setting.baseline - float(best.max())
    number = "; ".join(f"{m}: late-pass loss - pass-2 loss {r['mean']:+.4f} [{r['low']:+.4f}, {r['high']:+.4f}, "
                       f"{r['seeds']} seeds], residual {', '.join(behaviours[m])}" for m, r in rises.items())
    number += "; fixed point (exact recurrence vs best trained pass): " + ", ".join(
        f"{r.run} {r.exact_loss:.3f} vs {r.best_pass_loss:.3f} nats"
        + ("" if not setting.accuracy else f", accuracy {r.exact_accuracy:.3f} vs {r.best_pass_accuracy:.3f}")
        for r in table.itertuples())
    for r in table[table["mechanism"] == "lrt"].itertuples():  # the cross: reported, never in the rule
        uses = r.heldout_loss_pass2 - r.heldout_loss_pass1
        number += (f"; cross, LRT under {r.mix} (exploratory): pass 2 - pass 1 {uses:+.4f} nats "
                   f"({'uses' if uses < 0 else 'does not use'} its feedback), late-pass rise {r.late_rise:+.4f}, "
                   f"residual {r.residual_behaviour}")
    chance = f"{setting.baseline_name} {setting.baseline:.3f} nats per target"
    extra = {"rises": rises, "window_from": W, "passes": passes, "seq_len": T, "baseline": setting.baseline}
    shown = {**extra, "recipe": ctx.recipe.name, "chance": chance}
    return Outcome(table, lambda gated: study_figure(stacked, {**shown, "verdict": gated}), number, verdict, gates,
                   chance=chance, extra=extra)


STUDY_FIELDS = {"recipe", "seq_len", "passes", "window_from", "chance", "baseline", "verdict"}  # what it reads


def study_figure(pass_dynamics: pd.DataFrame, summary: Mapping[str, Any]) -> Figure:
    """From the saved table and summary, so a redraw from the files shows the same figure."""
    from ..plots import contraction_curves

    title = (f"{summary['recipe']}: T = {summary['seq_len']}, passes 1..{summary['passes']}, every quantity over "
             f"positions t >= {summary['window_from']} (none exact by causality); trained at <= 1 / 2 / 3 passes"
             f"\nverdict: {summary['verdict']}")
    return contraction_curves(dict(tuple(pass_dynamics.groupby("run", sort=False))), note=title,
                              depths={"trained depth 2 (75/25)": 2, "trained depth 3 (75/22/3)": 3},
                              chance={summary["chance"]: summary["baseline"]})


PREREGISTERED = preregistered("pass_mix_study", LATE_PASS=LATE_PASS)
CLAIM, PAPER, RULE = PREREGISTERED["claim"], PREREGISTERED["paper"], PREREGISTERED["rule"]


def gates(baseline_name: str, margin: float, gated: tuple[str, ...]) -> tuple[Gate, ...]:
    return (Gate("positions exact by causality", "largest share of the measured positions (t >= 3T/4) that any "
                 "pass iterated has made exact: 0, or the curves show the recurrence, not the iteration", "<=", 0.0),
            *(Gate(f"{m} uses feedback", "held-out pass-2 loss minus pass-1 loss, worst seed (nats per target)",
                   "<", 0.0) for m in FEEDBACK_MIXES),
            *(Gate(f"{m} below {baseline_name}", f"{baseline_name} minus the held-out loss at the model's best "
                   "of passes 1-2, worst seed (nats per target)", ">=", margin) for m in gated))

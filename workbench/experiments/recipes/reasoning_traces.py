"""Trace length under SOFT vs STANDARD decoding (arXiv 2608.08888): shorter traces at equal or better accuracy?

Lengths mean something only when the model answers: an FBT trained on an easier ``arith_cot``, gated on STANDARD
accuracy. The verdict samples (greedy made every trace full) and reads ``soft_last``: the paper's SOFT prefills
plainly, so its first token is STANDARD's by construction."""

from __future__ import annotations

import pandas as pd

from ... import tasks
from ...analysis.traces import (
    compare_regimes,
    first_decisions,
    line_distribution,
    summarize_traces,
    trace_lengths,
    training_traces,
)
from ...schedules import Multipass, PassMix, condition, regime
from ...stats import MIN_SEEDS
from ..common import FBT_MIX, SMALL_MODEL, config, describe, eval_size, steps
from ..core import EVAL_SEED, Context, Finding, Gate, Outcome, Recipe, RunSpec, lead, preregistered

# easier than the default (3 steps, operands <= 99); an operand <= 3 is never written out (42 % of the lines).
# Full or skipped traces, no answer-only ones: with them (and the folded lines) 56 % of the training traces wrote
# no line, so every regime's median trace was 0 tokens and the median could not move.
TASK = {"steps": 3, "max_value": 19, "eos": True, "skip_trivial": 3, "verbosity": "full_or_skip"}
FBT = {**SMALL_MODEL, "mechanism": "fbt"}
BASELINE = {**SMALL_MODEL, "tie_embeddings": True}  # the FBT model's shape without feedback
SEEDS = (0, 1, 2)  # FBT seeds: the regimes are compared on these
BASELINE_SEEDS = (0,)  # context only (no decision rests on it): the training budget goes to the FBT seeds
TRAIN_STEPS = 5000  # at 2000 the folded lines left STANDARD at 0.44-0.50 (a trial run: 0.92 at 5000)
PREFILL_PASSES = 2  # FUSED: fused prefill passes after the plain one (3 in all; training drew up to 3)
VERDICT_REGIME = "soft_last"  # the SOFT the verdict reads: started at the prompt's last token
REGIMES = {"standard": regime("standard"), "soft": regime("soft"), VERDICT_REGIME: condition("suffix1"),
           "fused": regime("fused", PREFILL_PASSES)}
TEMPERATURE = 1.0  # the verdict's decoding: sampling from the model's own distribution
DECODINGS = {"sampled": TEMPERATURE, "greedy": 0.0}  # decoding -> temperature; the first is the verdict's
VERDICT_DECODING = next(iter(DECODINGS))
N_EXAMPLES = 200  # held-out questions decoded per run, regime and decoding at scale 1
COMPETENT = 0.8  # held-out STANDARD accuracy (greedy) every FBT seed needs
ACCURACY_MARGIN = 0.05  # SOFT may not be worse than STANDARD by more than this (accuracy, absolute)
GATE = "fbt STANDARD accuracy"
SEPARABLE = 1e-6  # first-token log-probabilities of SOFT and STANDARD closer than this: the same first decision


def build(scale: float) -> list[RunSpec]:
    # the paper's FBT recipe read as the paper words it: a fresh plain prefix in every pass after the first
    fbt = [RunSpec(f"fbt_s{seed}", config("arith_cot", FBT, steps(TRAIN_STEPS, scale), seed, TASK,
                                           schedule=PassMix.of(FBT_MIX, passes=3), feedback_start=0.3,
                                           prefix_mixin=0.5, prefix_draw="pass"),
                   Multipass(2), eval_size(scale)) for seed in SEEDS]
    return fbt + [RunSpec(f"baseline_s{seed}", config("arith_cot", BASELINE, steps(TRAIN_STEPS, scale), seed, TASK),
                                                    eval_size=eval_size(scale))
                  for seed in BASELINE_SEEDS]


def decide(length: dict[str, float], accuracy: dict[str, float], first_gap: float = float("inf")) -> str:
    """The rule on SOFT - STANDARD intervals; not tested if the regimes cannot separate."""
    if length["seeds"] < MIN_SEEDS:
        return f"not tested: seeds = {length['seeds']} (needs >= {MIN_SEEDS})"
    why = []
    if first_gap < SEPARABLE:
        why.append(f"SOFT's first decision is STANDARD's (their first-token log-probabilities differ by at most "
                   f"{first_gap:.2g})")
    if length["low"] == length["high"]:
        why.append(f"the median-length interval has zero width ({length['low']:+g} tokens on every resample)")
    if why:
        return "not tested: the design cannot separate the regimes: " + "; ".join(why)
    if accuracy["high"] < -ACCURACY_MARGIN or length["low"] >= 0:
        return "does not reproduce"
    if length["high"] < 0 and accuracy["low"] >= -ACCURACY_MARGIN:
        return "reproduces"
    return "inconclusive"


def written_trivial(traces: pd.DataFrame, task: tasks.Task, n: int) -> pd.Series:
    """Per trace: whether it wrote a line training never writes."""
    prompts = task.sample(n, seed=EVAL_SEED, split="val").prompts
    allowed = [sum(not t for t in task.trivial(p)) for p in prompts]
    return traces["lines"] > traces["example"].map(lambda i: allowed[i])


def shown_traces(traces: pd.DataFrame, task: tasks.Task) -> pd.DataFrame:
    """The figure's traces: the verdict decoding's regimes and the training mix."""
    sampled = traces[traces["decoding"] == VERDICT_DECODING]
    return pd.concat([sampled[sampled["arm"] == "fbt"],
                      sampled[sampled["arm"] == "baseline"].assign(regime="baseline"),
                      training_traces(task, n=2000, seed=0)], ignore_index=True)


def chance_accuracy(task: tasks.Task, n: int) -> float:
    """The accuracy of always giving the most frequent held-out answer."""
    answers = task.sample(n, seed=EVAL_SEED, split="val").labels
    return float(answers.bincount().max()) / len(answers)


def traces_figure(traces: pd.DataFrame, lines: pd.DataFrame | None = None):
    """The recipe's figure redrawn from its tables, with the chance line."""
    from ...plots import trace_lengths as plot_traces

    task = tasks.get("arith_cot", **TASK)
    return plot_traces(shown_traces(traces, task), lines,
                       chance=chance_accuracy(task, traces["example"].nunique()))


def analyze(ctx: Context) -> Outcome:
    task = tasks.get("arith_cot", **TASK)
    n = max(16, int(N_EXAMPLES * min(1.0, ctx.scale)))
    frames, firsts = [], []
    for name, model in ctx.models.items():
        fbt = name.startswith("fbt_")
        regimes = REGIMES if fbt else {"standard": REGIMES["standard"]}
        for decoding, temperature in DECODINGS.items():
            frame = trace_lengths(model, task, regimes, n=n, seed=EVAL_SEED, max_new_tokens=task.seq_len,
                                  temperature=temperature)
            frames.append(frame.assign(run=name, arm="fbt" if fbt else "baseline", decoding=decoding))
        if fbt:  # can the regimes differ at all? each SOFT's first decision against STANDARD's, on the same problems
            firsts.append(first_decisions(model, task, {r: REGIMES[r] for r in ("standard", "soft", VERDICT_REGIME)},
                                          n=n, seed=EVAL_SEED).assign(run=name))
    traces = pd.concat(frames, ignore_index=True)
    traces["written_trivial"] = written_trivial(traces, task, n)
    traces.to_csv(ctx.out / "traces.csv", index=False)
    fbt = traces[traces["arm"] == "fbt"]
    table = pd.concat([compare_regimes(fbt[fbt["decoding"] == d]).assign(decoding=d) for d in DECODINGS],
                      ignore_index=True)
    shown = shown_traces(traces, task)
    lines = line_distribution(shown)
    lines.to_csv(ctx.out / "lines.csv", index=False)
    per_seed = summarize_traces(traces, by=("arm", "run", "decoding", "regime"))
    per_seed.to_csv(ctx.out / "per_seed.csv", index=False)
    rows = table.set_index(["decoding", "regime", "quantity"])

    def interval(regime: str, quantity: str, decoding: str = VERDICT_DECODING) -> dict[str, float]:
        row = rows.loc[(decoding, regime, quantity)]
        return {"mean": float(row["diff"]), "low": float(row["low"]), "high": float(row["high"]),
                "seeds": int(row["seeds"])}

    first = pd.concat(firsts, ignore_index=True)
    first.to_csv(ctx.out / "first_decisions.csv", index=False)
    standard_first = first[first["regime"] == "standard"]["first_token"].to_numpy()
    gaps, same = {}, {}
    for r in ("soft", VERDICT_REGIME):
        part = first[first["regime"] == r]
        gaps[r] = float(part["max_logprob_gap"].max())
        same[r] = float((part["first_token"].to_numpy() == standard_first).mean())
    decisions = {(d, r): decide(interval(r, "median_length", d), interval(r, "accuracy", d), gaps[r])
                 for d in DECODINGS for r in ("soft", VERDICT_REGIME)}
    length, accuracy = interval(VERDICT_REGIME, "median_length"), interval(VERDICT_REGIME, "accuracy")
    greedy_standard = fbt[(fbt["decoding"] == "greedy") & (fbt["regime"] == "standard")]
    trivial = float(greedy_standard["written_trivial"].mean())
    number = "; ".join([
        describe(f"median trace {VERDICT_REGIME} - standard ({VERDICT_DECODING})", length, "tokens"),
        describe(f"accuracy {VERDICT_REGIME} - standard ({VERDICT_DECODING})", accuracy, ""),
        *(f"{d}: " + ", ".join(f"{r} accuracy {rows.loc[(d, r, 'accuracy'), 'value']:.3f} median "
                               f"{rows.loc[(d, r, 'median_length'), 'value']:g} tokens" for r in REGIMES)
          for d in DECODINGS),
        *(f"the paper's SOFT ({d}): {decisions[d, 'soft']}" for d in DECODINGS),
        f"{VERDICT_REGIME} greedy: {decisions['greedy', VERDICT_REGIME]}",
        *(f"{r}'s first token: log-probabilities within {gaps[r]:.2g} of STANDARD's, the same choice on "
          f"{same[r]:.3f} of the problems" for r in gaps),
        f"STANDARD greedy traces that write a trivial line (never in training): {trivial:.3f}",
        "SOFT's accuracy cost (its own finding, the paper's SOFT minus STANDARD): " + ", ".join(
            describe(d, interval("soft", "accuracy", d), "") for d in DECODINGS)])
    return Outcome(table, lambda _: traces_figure(traces, lines), number, decisions[VERDICT_DECODING, VERDICT_REGIME],
                   {GATE: float(greedy_standard.groupby("run")["correct"].mean().min())},
                   chance=f"accuracy {chance_accuracy(task, n):.3f}: always the most frequent held-out answer",
                   extra={"per_seed": per_seed.to_dict("records"), "first_gap": gaps[VERDICT_REGIME],
                          "first_gaps": gaps, "first_same_choice": same,
                          "decisions": {f"{r} {d}": v for (d, r), v in decisions.items()},
                          "written_trivial": trivial, "soft_accuracy": interval("soft", "accuracy"),
                          "verdict_accuracy": accuracy})


def finding(summary: dict, results: pd.DataFrame) -> Finding:
    """The verdict's SOFT vs STANDARD: median trace and accuracy change."""
    rows = results[results["decoding"] == VERDICT_DECODING].set_index(["regime", "quantity"])

    def change(regime: str, quantity: str, digits: int) -> str:
        r = rows.loc[(regime, quantity)]
        return f"{r['diff']:+.{digits}f} [{r['low']:+.{digits}f}, {r['high']:+.{digits}f}]"

    length, accuracy = change(VERDICT_REGIME, "median_length", 1), change(VERDICT_REGIME, "accuracy", 3)
    base = {q: rows.loc[("standard", q), "value"] for q in ("median_length", "accuracy")}
    return Finding(f"median trace {length} tokens, accuracy {accuracy} ({VERDICT_REGIME} minus STANDARD, "
                   f"{VERDICT_DECODING})",
                   lead(summary) or f"Sampling at temperature {TEMPERATURE:g}, SOFT started at the prompt's last "
                   f"token changes the median reasoning trace by {length} tokens and the accuracy by {accuracy}, "
                   f"against STANDARD's {base['median_length']:g} tokens and {base['accuracy']:.3f}.")


RECIPE = Recipe(
    "reasoning_traces", build=build, analyze=analyze,
    gates=(Gate(GATE, "worst FBT seed's held-out answer accuracy under STANDARD greedy decoding", ">=", COMPETENT),),
    finding=finding,
    **preregistered("reasoning_traces", TASK=TASK, TRAIN_STEPS=TRAIN_STEPS, N_SEEDS=len(SEEDS),
                    N_BASELINE_SEEDS=len(BASELINE_SEEDS), N_EXAMPLES=N_EXAMPLES, TEMPERATURE=TEMPERATURE,
                    VERDICT_REGIME=VERDICT_REGIME, SEPARABLE=SEPARABLE, ACCURACY_MARGIN=ACCURACY_MARGIN,
                    MIN_SEEDS=MIN_SEEDS))

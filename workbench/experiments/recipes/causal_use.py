"""Decodability is not use: causal interventions on the feedback channel (ours, beyond the papers).

The FBT paper (arXiv 2608.08888, appendix F) warns that its layer-0 probe shows the label is
decodable after one recurrent step, not that the model uses it there; an untrained FBT of the same
shape exposes the label too. This recipe trains nothing: it intervenes on the specimens
``layer0_probes`` trained and gated, and on the text specimens of ``lrt_vs_baseline``.

(a) Per gated FBT specimen (task x scratch length; held-out answer accuracy >= 0.95 under suffix1,
the specimen's own gate, measured again here), in the probe's own condition (a plain prefill, then
the label position reads the previous position's memory): **swap** that memory with a group mate's
whose label differs (same context, other label), against a **control** (a same-label example's
memory) and **mean** ablation (and zero, for reference). If the model reads the label from the
memory, its answer follows the mate: the swap flips it and the control does not. The flip rates
sit next to the probe's layer-0 accuracy and the untrained twin's (``layer0_probes/results.csv``).
Only runs the specimen recipe would reuse as they stand
(trained under its current spec) are read.

(b) On the LRT text specimens (gated: below the unigram loss by a margin): the memory read at
position r is mean-ablated and the next-token loss change measured at ``t = r + d - 1``: how far
back does the recurrent state matter?
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ... import tasks
from ...analysis.interventions import ablation_by_distance, label_swap
from ...analysis.probes import answer_correct
from ...checkpoint import load_checkpoint, load_metrics
from ...evaluation import hierarchical_difference
from .. import probe_specimens, text_arms
from ..core import EVAL_SEED, Context, Finding, Gate, Outcome, Recipe, RunSpec, default_finding
from ..probe_specimens import (
    COMPETENT,
    GATE_CONDITION,
    GATE_N,
    PROBE_TASKS,
    SCRATCH,
    gate_batch,
    probe_task,
    run_name,
)
from ..store import EVAL_FILE, up_to_date

SPECIMENS = "layer0_probes"  # the recipe whose FBT specimens are intervened on
TEXT_SPECIMENS = "lrt_vs_baseline"  # the recipe whose LRT text specimens are ablated
TEXT_PREFIX = "text_lrt_interleaved_s"
N = 256  # intervention examples per specimen (whole groups)
SEED = EVAL_SEED + 2  # held out, and neither the gate's (EVAL_SEED) nor the probe's (EVAL_SEED + 1) examples
KINDS = ("swap", "control", "mean", "zero")
DECISIVE = 0.5  # a swap that flips at least this share of answers: the model answers from the memory
NEGLIGIBLE = 0.05  # a swap - control interval wholly below this: no use of the memory's label to speak of
TEXT_N = 32  # held-out windows per text specimen
MAX_DISTANCE = 16
TEXT_MARGIN = 1.0  # bits/byte an LRT text specimen must sit below the unigram loss before it is ablated

RULE = (f"Per gated specimen, first two checks that the design could say 'uses': the memory is needed (on the "
        f"examples scored, the 95 % group interval of suffix1 - standard answer accuracy lies above 0), and an edit of "
        f"the site moves answers (the mean or zero ablation's flip-rate interval lies above {NEGLIGIBLE}); a specimen "
        f"failing either is 'not tested' with the reason. Then, on the answer's flip rate (the label's first token "
        f"against the other label's) under the probe's suffix1 condition: 'uses' when the 95 % hierarchical interval "
        f"(specimen seeds, then groups) of swap - control flip rate lies above 0 and the swap flips >= {DECISIVE} of "
        f"the answers; 'partly uses' when the interval lies above 0 and the swap flips fewer; 'does not use' (the "
        f"label the memory carries) when the interval lies wholly below {NEGLIGIBLE}; 'inconclusive' otherwise. A "
        f"task's verdict joins its gated specimens' (scratch lengths); a "
        f"specimen that misses its gate (answer accuracy >= {COMPETENT} under suffix1) is reported, never "
        f"intervened on. The LRT text part is descriptive (no verdict), measured only on specimens >= {TEXT_MARGIN} "
        f"bits/byte below unigram.")


def build(scale: float) -> list[RunSpec]:
    """Nothing to train: the specimens are ``layer0_probes``' and ``lrt_vs_baseline``'s."""
    return []


PROBE_COLUMNS = ("accuracy", "accuracy_low", "accuracy_high", "twin_accuracy")


def probe_row(root: Path, task: str, scratch: int) -> dict[str, float]:
    """The specimen's layer-0 probe after one recurrent step (suffix1) with its interval, and its untrained
    twin's, as ``layer0_probes`` recorded them (its ``reproduce`` writes the table with the specimens it
    trains); NaN when the table has no such row."""
    results_path = root / SPECIMENS / "results.csv"
    missing = {f"probe_{c}": math.nan for c in PROBE_COLUMNS}
    if not results_path.is_file():
        return missing
    results = pd.read_csv(results_path)
    if not {"run", "model", "layer", "condition", "scratch_updates", *PROBE_COLUMNS} <= set(results.columns):
        return missing
    row = results[(results["run"] == run_name(task, "fbt")) & (results["model"] == "trained")
                  & (results["layer"] == 0) & (results["condition"] == "suffix1")
                  & (results["scratch_updates"] == scratch)]
    return {f"probe_{c}": float(row[c].iloc[0]) for c in PROBE_COLUMNS} if len(row) else missing


def current(path: Path, spec: RunSpec) -> bool:
    """Whether the run saved at ``path`` was trained under ``spec`` (the specimen recipe as it stands now)."""
    return up_to_date(path, spec)


def group_means(frame: pd.DataFrame, kind: str, column: str = "flipped") -> np.ndarray:
    """Per-group mean of ``column`` for one intervention: groups share their context, so they, not the
    examples, are the independent draws an interval resamples."""
    rows = frame[frame["intervention"] == kind]
    return rows.groupby("group", sort=True)[column].mean().to_numpy(dtype=np.float64)


def specimen_verdict(diff: dict[str, float], swap_rate: float, needed: dict[str, float] | None = None,
                     site_moves: float | None = None) -> str:
    """The rule for one specimen. ``needed``: the interval of suffix1 - standard answer accuracy on the scored
    examples (None: not checked, as in a unit test of the flip rule alone); ``site_moves``: the larger lower
    bound of the mean and zero ablations' flip rates. A negative is only drawn where the memory is needed and
    an edit of the site can move the answer: otherwise no swap could have flipped anything."""
    if needed is not None and not needed["low"] > 0:
        return "not tested: feedback not needed"
    if diff["low"] > 0:
        return "uses" if swap_rate >= DECISIVE else "partly uses"
    if diff["high"] < NEGLIGIBLE:
        if site_moves is not None and not site_moves > NEGLIGIBLE:
            return "not tested: no edit of the site moves the answer"
        return "does not use"
    return "inconclusive"


def memory_needed(model, batch: tasks.Batch, seed: int) -> dict[str, float]:
    """On the examples scored: standard and suffix1 answer accuracy, and the 95 % interval over the batch's
    groups of their difference. A specimen that answers as well without its memory cannot show use by any
    edit of it."""
    standard = answer_correct(model, batch, "standard").astype(np.float64)
    fed = answer_correct(model, batch, GATE_CONDITION["fbt"]).astype(np.float64)
    groups = batch.groups.cpu().numpy()
    by_group = lambda values: pd.Series(values).groupby(groups).mean().to_numpy()  # noqa: E731
    diff = hierarchical_difference([by_group(standard)], [by_group(fed)], seed=seed)
    return {"reference": float(standard.mean()), "treatment": float(fed.mean()), "low": diff["low"],
            "high": diff["high"], "mean": diff["mean"]}


def _swap_table(root: Path, scale: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per gated specimen: flip rates with intervals, probe and twin accuracy, verdict; and every specimen's
    gate. A saved run the specimen recipe would not reuse (trained under another spec) is reported, not read."""
    n, gate_n = max(32, int(N * min(1.0, scale))), max(32, int(GATE_N * min(1.0, scale)))
    specs = {spec.name: spec for spec in probe_specimens.build(scale)}
    rows, gates = [], []
    jobs = [(task, s) for task in PROBE_TASKS for s in SCRATCH if (root / SPECIMENS / run_name(task, "fbt")).is_dir()]
    for task, scratch in tqdm(jobs, desc="specimens", leave=False):
        path = root / SPECIMENS / run_name(task, "fbt")
        if not current(path, specs[run_name(task, "fbt")]):
            gates.append({"task": task, "scratch_updates": scratch, "answer_accuracy": math.nan, "gated": False,
                          "note": f"not trained by the current {SPECIMENS} recipe"})
            continue
        model = load_checkpoint(path)
        accuracy = float(answer_correct(model, gate_batch(task, scratch, n=gate_n), GATE_CONDITION["fbt"]).mean())
        seed = int(load_metrics(root / SPECIMENS / run_name(task, "fbt")).get("seed", 0))
        gates.append({"task": task, "scratch_updates": scratch, "answer_accuracy": accuracy,
                      "gated": accuracy >= COMPETENT, "note": ""})
        if accuracy < COMPETENT:
            continue
        scored = probe_task(task, scratch).sample(n, SEED, "val")
        frame = label_swap(model, scored, kinds=KINDS)
        per_seed = {kind: [group_means(frame, kind)] for kind in KINDS}  # one specimen seed so far
        row = {"task": task, "scratch_updates": scratch, "seed": seed,
               "answer_accuracy": accuracy, "n": int(frame["example"].nunique()),
               "groups": int(frame["group"].nunique()), **probe_row(root, task, scratch)}
        for kind in KINDS:
            rate = hierarchical_difference([np.zeros_like(per_seed[kind][0])], per_seed[kind], seed=len(rows))
            row.update({f"{kind}_flip": rate["mean"], f"{kind}_low": rate["low"], f"{kind}_high": rate["high"],
                        f"{kind}_logit_change": float(frame.loc[frame["intervention"] == kind,
                                                                "logit_diff_change"].mean())})
        diff = hierarchical_difference(per_seed["control"], per_seed["swap"], seed=len(rows))
        needed = memory_needed(model, scored, seed=len(rows))
        site_moves = max(row["mean_low"], row["zero_low"])
        row.update({"swap_minus_control": diff["mean"], "diff_low": diff["low"], "diff_high": diff["high"],
                    "standard_accuracy": needed["reference"], "fed_accuracy": needed["treatment"],
                    "needed_low": needed["low"], "needed_high": needed["high"], "site_moves": site_moves,
                    "verdict": specimen_verdict(diff, row["swap_flip"], needed, site_moves)})
        rows.append(row)
    return pd.DataFrame(rows), pd.DataFrame(gates)


def text_gate_value(path: Path) -> float:
    """Unigram minus exact held-out loss of a text specimen, in bits/byte (its recorded evaluation)."""
    per_example = pd.read_csv(path / EVAL_FILE)
    params = load_metrics(path)["train_config"]["task_params"]
    loss = float(per_example["nats"].sum() / per_example["targets"].sum())
    return (tasks.get("text", **params).unigram_loss() - loss) / math.log(2)


def _distance_table(root: Path, scale: float) -> tuple[pd.DataFrame, dict[str, float]]:
    """Per gated LRT text specimen (runs of the text recipe as it stands): mean loss increase (nats) by
    ablated position and distance."""
    specs = {spec.name: spec for spec in
             text_arms.text_runs(("baseline", "lrt_interleaved"), scale) if spec.name.startswith(TEXT_PREFIX)}
    names = [name for name, spec in specs.items() if current(root / TEXT_SPECIMENS / name, spec)]
    frames, gate_values = [], {}
    for name in tqdm(names, desc="text specimens", leave=False):
        path = root / TEXT_SPECIMENS / name
        gate_values[name] = text_gate_value(path)
        if gate_values[name] < TEXT_MARGIN:
            continue
        model = load_checkpoint(path)
        params = load_metrics(path)["train_config"]["task_params"]
        batch = tasks.get("text", **params).sample(max(4, int(TEXT_N * min(1.0, scale))), EVAL_SEED, "val")
        frame = ablation_by_distance(model, batch.tokens, MAX_DISTANCE, targets=batch.targets, kind="mean",
                                     schedule="sequential", batch_size=1024)
        frame["run"], frame["seed"] = name, int(load_metrics(path).get("seed", 0))
        frames.append(frame)
    return (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()), gate_values


DISTANCE_COLUMNS = ["distance", "increase", "low", "high", "seeds"]


def distance_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per distance: mean loss increase with a hierarchical interval (seeds, then windows)."""
    rows = []
    for d, at in frame.groupby("distance"):
        per_example = at.groupby(["run", "example"])["increase"].mean()
        arrays = [per_example[run].to_numpy() for run in sorted(at["run"].unique())]
        zeros = [np.zeros_like(a) for a in arrays]
        interval = hierarchical_difference(zeros, arrays, seed=int(d))
        rows.append({"distance": int(d), "increase": interval["mean"], "low": interval["low"],
                     "high": interval["high"], "seeds": len(arrays)})
    return pd.DataFrame(rows, columns=DISTANCE_COLUMNS)


def causal_use_figure(swaps: pd.DataFrame, distances: pd.DataFrame):
    """This recipe's figure: the swap flip rates (``plots.swap_flips``) and the LRT ablation by distance
    (``plots.ablation_distance``) side by side."""
    import seaborn as sns
    from matplotlib.figure import Figure

    from ...plots import STYLE, ablation_distance, swap_flips

    with sns.axes_style(STYLE):
        fig = Figure(figsize=(15.5, 4.2), layout="constrained")
        grid = fig.add_gridspec(1, 4)
        swap_ax = fig.add_subplot(grid[0, :2])
        distance_axes = [fig.add_subplot(grid[0, 2]), fig.add_subplot(grid[0, 3])]
    swap_flips(swaps, swap_ax)
    ablation_distance(distances, distance_axes)
    return fig


def analyze(ctx: Context) -> Outcome:
    root = ctx.out.parent
    swaps, gates = _swap_table(root, ctx.scale)
    distances, text_gates = _distance_table(root, ctx.scale)
    summary = distance_summary(distances) if not distances.empty else pd.DataFrame(columns=DISTANCE_COLUMNS)
    verdicts, words = {}, []
    for task in PROBE_TASKS:
        mine = swaps[swaps["task"] == task] if not swaps.empty else swaps
        missed = gates[(gates["task"] == task) & ~gates["gated"]] if not gates.empty else gates
        skipped = "".join(f"; s{r.scratch_updates} not intervened on ("
                          + (r.note or f"answer accuracy {r.answer_accuracy:.3f} < {COMPETENT}") + ")"
                          for r in missed.itertuples())
        if mine.empty:
            verdicts[task] = "not tested: no gated specimen"
            words.append(f"{task}: no gated specimen{skipped}")
            continue
        found = list(dict.fromkeys(mine["verdict"]))
        verdicts[task] = found[0] if len(found) == 1 else "mixed: " + ", ".join(
            f"s{r.scratch_updates} {r.verdict}" for r in mine.itertuples())
        words.append(f"{task}: " + ", ".join(
            f"s{r.scratch_updates} swap flips {r.swap_flip:.3f} [{r.swap_low:.3f}, {r.swap_high:.3f}] vs control "
            f"{r.control_flip:.3f} [{r.control_low:.3f}, {r.control_high:.3f}], mean {r.mean_flip:.3f}; "
            + (f"probe {r.probe_accuracy:.3f}, twin {r.probe_twin_accuracy:.3f}" if not math.isnan(r.probe_accuracy)
               else f"probe not recorded by {SPECIMENS} for these weights")
            + f"; on these examples standard {r.standard_accuracy:.3f} vs suffix1 {r.fed_accuracy:.3f} (needed: "
              f"[{r.needed_low:+.3f}, {r.needed_high:+.3f}]), mean / zero ablation flips >= {r.site_moves:.3f}"
            + f" -> {r.verdict}" for r in mine.itertuples())
                     + skipped)
    if not summary.empty:
        near = summary.set_index("distance")["increase"]
        words.append(f"LRT text ({int(summary['seeds'].iloc[0])} seeds), mean-ablating the memory read d back: "
                     + ", ".join(f"d={d} {near[d]:+.4f}" for d in (1, 2, 4, 8, MAX_DISTANCE) if d in near)
                     + " nats")
    else:
        measured = ", ".join(f"{k} {v:.2f}" for k, v in text_gates.items())
        words.append(f"LRT text: no specimen passed its gate ({measured} bits/byte below unigram, needs >= "
                     f"{TEXT_MARGIN})" if text_gates else f"LRT text: no specimen found under {TEXT_SPECIMENS}")
    table = pd.concat([swaps.assign(part="swap"), summary.assign(part="lrt_distance")], ignore_index=True)
    distances.to_csv(ctx.out / "distances.csv", index=False)  # by position: what the figure's right panels read
    figure = causal_use_figure(swaps, distances)
    verdict = "; ".join(f"{task}: {v}" for task, v in verdicts.items())
    gated = float(gates["gated"].sum()) if not gates.empty else 0.0
    return Outcome(table, figure, "; ".join(words), verdict, {"gated FBT specimens": gated},
                   chance="a control swap (same label) flips what the swap would without reading the label; the "
                          "untrained twin's probe accuracy is the architecture's free lift",
                   extra={"specimen_gates": gates.to_dict("records"), "task_verdicts": verdicts,
                          "text_gates": text_gates,
                          "seeds": sorted(int(s) for s in swaps["seed"].unique()) if not swaps.empty else []})


def finding(summary: dict, results: pd.DataFrame) -> Finding:
    """Per verdict, the specimens it covers, with the numbers that decided it: whether the feedback was needed
    at all, and how many answers a swap of the memory flipped against its same-label control."""
    swaps = results[results["part"] == "swap"]
    if swaps.empty:
        return default_finding(summary, results)
    said = []
    for verdict, rows in swaps.groupby("verdict", sort=False):
        names = ", ".join(f"{r.task} s{int(r.scratch_updates)}" for r in rows.itertuples())
        if verdict == "not tested: feedback not needed":
            said.append(f"On {names} the competent specimens answer as well without the memory as with it "
                        f"(standard {rows['standard_accuracy'].min():.3f}-{rows['standard_accuracy'].max():.3f} vs "
                        f"one recurrent step {rows['fed_accuracy'].min():.3f}-{rows['fed_accuracy'].max():.3f}), "
                        "so no edit of the memory could flip an answer: use is not tested there.")
        else:
            said.append(f"On {names} ({verdict}) swapping the memory for a mate's of the other label flips "
                        f"{rows['swap_flip'].min():.3f}-{rows['swap_flip'].max():.3f} of the answers, a same-label "
                        f"control {rows['control_flip'].min():.3f}-{rows['control_flip'].max():.3f}.")
    tested = swaps[~swaps["verdict"].str.startswith("not tested")]
    ours = (f"swap flips {tested['swap_flip'].min():.3f}-{tested['swap_flip'].max():.3f}" if len(tested) else
            f"not tested on {len(swaps)} of {len(swaps)} specimens")
    return Finding(ours, " ".join(said))


RECIPE = Recipe(
    "causal_use",
    "Ours, beyond the papers: the FBT paper's layer-0 probe (99.6 % / 100 % after one recurrent step, arXiv "
    "2608.08888, appendix F) shows decodability, not use; does the model use the label its memory carries?",
    f"Every gated FBT specimen of {SPECIMENS} (task x scratch length): the memory read at the label position "
    f"swapped with a group mate's of the other label vs a same-label control, mean and zero ablation, {N} held-out "
    f"examples each under suffix1; the LRT text specimens of {TEXT_SPECIMENS}: the memory mean-ablated d = 1.."
    f"{MAX_DISTANCE} positions back, {TEXT_N} windows each, exact recurrence.",
    build, analyze,
    gates=(Gate("gated FBT specimens", f"FBT specimens of {SPECIMENS} whose held-out answer accuracy under suffix1 is "
                f">= {COMPETENT} (the specimens' own gates)", ">=", 1),),
    rule=RULE,
    chance="the control swap's flip rate (a same-label memory), and the untrained twin's probe accuracy.",
    caveat="The specimens come from one training seed per task, so the intervals resample groups of examples, not "
           "training seeds: a verdict speaks for these specimens, not for FBT training in general.",
    kind="exploratory", reads=(SPECIMENS, TEXT_SPECIMENS), finding=finding)

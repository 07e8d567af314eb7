"""Decodability is not use: causal interventions on the feedback channel (ours, beyond the papers).

arXiv 2608.08888's layer-0 probe (appendix F) shows the label decodable, not used: swap each gated ``layer0_probes``
FBT's memory for an other-label group mate's vs a same-label control (``DESIGNS``), with ``CONTROLS``' FBTs, which
need their feedback, as positive control; mean-ablate an LRT text specimen's memory d positions back."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ... import tasks
from ...analysis.features import answer_correct
from ...analysis.interventions import ablation_by_distance
from ...checkpoint import load_checkpoint, load_metrics
from ...evaluation import hierarchical_difference
from ...schedules import Multipass
from .. import pass_mix_study, probe_specimens, text_arms
from ..core import EVAL_SEED, Context, Finding, Gate, Outcome, Recipe, RunSpec, default_finding, preregistered
from ..decodability import label_swap
from ..pool import map_jobs
from ..probe_specimens import (
    ARM_SEEDS,
    COMPETENT,
    GATE_CONDITION,
    GATE_N,
    PROBE_TASKS,
    SCRATCH,
    gate_batch,
    probe_task,
    run_name,
    specimen_key,
)
from ..store import EVAL_FILE, up_to_date

SPECIMENS = "layer0_probes"
CONTROLS = "fbt_pass_mixes_registers"  # the recipe whose FBT specimens need their feedback: the positive control
TEXT_SPECIMENS = "lrt_vs_baseline"
TEXT_PREFIX = "text_lrt_interleaved_s"
N = 256  # intervention examples per specimen (whole groups)
SEED = EVAL_SEED + 2  # held out, and neither the gate's (EVAL_SEED) nor the probe's (EVAL_SEED + 1) examples
KINDS = ("swap", "control", "cross", "cross_control", "mean", "zero")
# design -> (the condition its memory must beat the plain pass in, the schedule, the span edited)
DESIGNS = {"site": ("suffix1", None, "site"), "stream": ("multipass2", Multipass(2), "stream")}
POWER_Z = 2.8  # z(0.975) + z(0.8): a difference this many standard errors away is detected 80 % of the time
DECISIVE = 0.5  # a swap that flips at least this share of answers: the model answers from the memory
NEGLIGIBLE = 0.05  # a swap - control interval wholly below this: no use of the memory's label to speak of
TEXT_N = 32
MAX_DISTANCE = 16
TEXT_MARGIN = 1.0  # bits/byte an LRT text specimen must sit below the unigram loss before it is ablated

PREREGISTERED = preregistered(
    "causal_use", SPECIMENS=SPECIMENS, N=N, CONTROLS=CONTROLS, TEXT_SPECIMENS=TEXT_SPECIMENS, MAX_DISTANCE=MAX_DISTANCE,
    TEXT_N=TEXT_N, DECISIVE=DECISIVE, NEGLIGIBLE=NEGLIGIBLE, POWER_Z=POWER_Z, COMPETENT=COMPETENT,
    TEXT_MARGIN=TEXT_MARGIN)
RULE = PREREGISTERED["rule"]


def build(scale: float) -> list[RunSpec]:
    """Nothing to train: reads other recipes' specimens."""
    return []


PROBE_COLUMNS = ("accuracy", "accuracy_low", "accuracy_high", "twin_accuracy")


def probe_row(root: Path, task: str, scratch: int, seed: int = 0) -> dict[str, float]:
    """The specimen's layer-0 suffix1 probe (``PROBE_COLUMNS``); NaN where not recorded."""
    results_path = root / SPECIMENS / "results.csv"
    missing = {f"probe_{c}": math.nan for c in PROBE_COLUMNS}
    if not results_path.is_file():
        return missing
    results = pd.read_csv(results_path)
    if not {"run", "model", "layer", "condition", "scratch_updates", *PROBE_COLUMNS} <= set(results.columns):
        return missing
    row = results[(results["run"] == run_name(task, "fbt", seed)) & (results["model"] == "trained")
                  & (results["layer"] == 0) & (results["condition"] == "suffix1")
                  & (results["scratch_updates"] == scratch)]
    return {f"probe_{c}": float(row[c].iloc[0]) for c in PROBE_COLUMNS} if len(row) else missing


def group_means(frame: pd.DataFrame, kind: str) -> np.ndarray:
    """Per-group share of flipped answers: groups share a context, so they are the resampled draws."""
    rows = frame[frame["intervention"] == kind]
    return rows.groupby("group", sort=True)["flipped"].mean().to_numpy(dtype=np.float64)


def specimen_verdict(diff: dict[str, float], swap_rate: float, needed: dict[str, float] | None = None,
                     site_moves: float | None = None) -> str:
    """``RULE`` for one specimen; ``needed`` and ``site_moves`` gate the negative readings."""
    if diff["low"] > 0:
        return "uses" if swap_rate >= DECISIVE else "partly uses"
    if needed is not None and not needed["low"] > 0:
        return "not tested: feedback not needed"
    if diff["high"] < NEGLIGIBLE:
        if site_moves is not None and not site_moves > NEGLIGIBLE:
            return "not tested: no edit of the site moves the answer"
        return "does not use"
    return "inconclusive"


def memory_needed(model, batch: tasks.Batch, seed: int, condition: str = GATE_CONDITION["fbt"]) -> dict[str, float]:
    """Plain vs fed answer accuracy and its group interval: where not needed, no swap had to flip."""
    standard = answer_correct(model, batch, "standard").astype(np.float64)
    fed = answer_correct(model, batch, condition).astype(np.float64)
    groups = batch.groups.cpu().numpy()
    by_group = lambda values: pd.Series(values).groupby(groups).mean().to_numpy()  # noqa: E731
    diff = hierarchical_difference([by_group(standard)], [by_group(fed)], seed=seed)
    return {"reference": float(standard.mean()), "treatment": float(fed.mean()), "low": diff["low"],
            "high": diff["high"], "mean": diff["mean"]}


def power(interval: dict[str, float]) -> float:
    """Smallest difference detected 80 % of the time; NaN for a zero width."""
    width = interval["high"] - interval["low"]
    return POWER_Z * width / 3.92 if width > 0 else math.nan


def design_row(model, batch: tasks.Batch, design: str, seed: int) -> dict[str, Any]:
    """One specimen under one design, with its verdict."""
    condition, schedule, span = DESIGNS[design]
    frame = label_swap(model, batch, kinds=KINDS, schedule=schedule, span=span)
    per_seed = {kind: [group_means(frame, kind)] for kind in KINDS}  # one specimen seed so far
    row: dict[str, Any] = {"design": design, "n": int(frame["example"].nunique()),
                           "groups": int(frame["group"].nunique())}
    for kind in KINDS:
        rate = hierarchical_difference([np.zeros_like(per_seed[kind][0])], per_seed[kind], seed=seed)
        row.update({f"{kind}_flip": rate["mean"], f"{kind}_low": rate["low"], f"{kind}_high": rate["high"],
                    f"{kind}_logit_change": float(frame.loc[frame["intervention"] == kind,
                                                            "logit_diff_change"].mean())})
    diff = hierarchical_difference(per_seed["control"], per_seed["swap"], seed=seed)
    cross = hierarchical_difference(per_seed["cross_control"], per_seed["cross"], seed=seed)
    needed = memory_needed(model, batch, seed=seed, condition=condition)
    site_moves = max(row["mean_low"], row["zero_low"])
    row.update({"swap_minus_control": diff["mean"], "diff_low": diff["low"], "diff_high": diff["high"],
                "power": power(diff), "cross_minus_control": cross["mean"], "cross_low": cross["low"],
                "cross_high": cross["high"], "standard_accuracy": needed["reference"],
                "fed_accuracy": needed["treatment"], "needed_low": needed["low"], "needed_high": needed["high"],
                "site_moves": site_moves, "verdict": specimen_verdict(diff, row["swap_flip"], needed, site_moves)})
    return row


def _specimen_rows(path: str, task: str, scratch: int, seed: int, n: int, gate_n: int,
                   index: int) -> tuple[dict, list[dict]]:
    """Gate and design rows of one specimen; seeds from ``index``, so any worker count agrees."""
    model = load_checkpoint(path)
    accuracy = float(answer_correct(model, gate_batch(task, scratch, n=gate_n), GATE_CONDITION["fbt"]).mean())
    gate = {"task": task, "scratch_updates": scratch, "seed": seed, "answer_accuracy": accuracy,
            "gated": accuracy >= COMPETENT, "note": ""}
    if accuracy < COMPETENT:
        return gate, []
    scored = probe_task(task, scratch).sample(n, SEED, "val")
    root = Path(path).parent.parent
    return gate, [{"task": task, "scratch_updates": scratch, "seed": seed, "answer_accuracy": accuracy,
                   "specimen": specimen_key(task, scratch, seed), **probe_row(root, task, scratch, seed),
                   **design_row(model, scored, design, seed=len(DESIGNS) * index + i)}
                  for i, design in enumerate(DESIGNS)]


def _swap_table(root: Path, scale: float, jobs: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Design rows of the gated specimens, and every gate (a stale run reported, not read)."""
    n, gate_n = max(32, int(N * min(1.0, scale))), max(32, int(GATE_N * min(1.0, scale)))
    specs = {spec.name: spec for spec in probe_specimens.build(scale)}
    path = lambda task, seed: root / SPECIMENS / run_name(task, "fbt", seed)  # noqa: E731
    found = [(task, seed, s) for task in PROBE_TASKS for seed in ARM_SEEDS["fbt"] for s in SCRATCH
             if path(task, seed).is_dir()]
    stale = [(task, seed, s) for task, seed, s in found
             if not up_to_date(path(task, seed), specs[run_name(task, "fbt", seed)])]
    calls = [(str(path(task, seed)), task, s, seed, n, gate_n, i)
             for i, (task, seed, s) in enumerate(found) if (task, seed, s) not in stale]
    done = map_jobs(_specimen_rows, calls, jobs, desc="specimens")
    gates = {(g["task"], g["seed"], g["scratch_updates"]): g for g, _ in done}
    gates.update({(task, seed, s): {"task": task, "scratch_updates": s, "seed": seed, "answer_accuracy": math.nan,
                                    "gated": False, "note": f"not trained by the current {SPECIMENS} recipe"}
                  for task, seed, s in stale})
    rows = [row for _, mine in done for row in mine]
    return pd.DataFrame(rows), pd.DataFrame([gates[key] for key in found])


def _control_rows(path: str, task: str, params: dict, seed: int, name: str, n: int, index: int) -> list[dict]:
    """One positive-control specimen under every design, labelled at the answer."""
    model = load_checkpoint(path)
    batch = tasks.get(task, **params, label_at="answer").sample(n, SEED, "val")
    return [{"task": task, "scratch_updates": int(params["scratch_updates"]), "seed": seed, "specimen": name,
             **design_row(model, batch, design, len(DESIGNS) * index + i)} for i, design in enumerate(DESIGNS)]


def _control_table(root: Path, scale: float, jobs: int = 1) -> pd.DataFrame:
    """Every design on ``CONTROLS``' current feedback-mix FBTs."""
    specs = [spec for spec in pass_mix_study.registers_runs(scale) if pass_mix_study.is_fbt(spec)
             and pass_mix_study.mix_of(spec) in pass_mix_study.FEEDBACK_MIXES]
    n = max(32, int(N * min(1.0, scale)))
    calls = [(str(root / CONTROLS / spec.name), spec.train.task, spec.train.task_params, spec.train.seed, spec.name,
              n, i) for i, spec in enumerate([s for s in specs if up_to_date(root / CONTROLS / s.name, s)])]
    return pd.DataFrame([row for rows in map_jobs(_control_rows, calls, jobs, desc="positive control")
                         for row in rows])


def control_detects(controls: pd.DataFrame) -> dict[str, bool]:
    """Per design: did it detect use on any positive-control specimen?"""
    return {d: not controls.empty and bool(controls[controls["design"] == d]["verdict"]
                                           .isin(("uses", "partly uses")).any()) for d in DESIGNS}


def with_positive_control(swaps: pd.DataFrame, controls: pd.DataFrame) -> pd.DataFrame:
    """'does not use' stands only where the design detects use on the positive control."""
    if swaps.empty:
        return swaps
    out = swaps.assign(controls_detect=swaps["design"].map(control_detects(controls)))
    blind = (out["verdict"] == "does not use") & ~out["controls_detect"]
    out.loc[blind, "verdict"] = "not tested: the design detects no use on the positive control"
    return out


def task_verdict(rows: pd.DataFrame) -> str:
    """Per design, its specimens' verdict (each one's when they differ), merged when designs agree."""
    said = {}
    for design, mine in rows.groupby("design", sort=False):
        found = list(dict.fromkeys(mine["verdict"]))
        said[design] = found[0] if len(found) == 1 else "mixed (" + ", ".join(
            f"{specimen_key('', r.scratch_updates, r.seed)} {r.verdict}"
            for r in mine.itertuples()) + ")"
    if len(set(said.values())) == 1:
        return next(iter(said.values()))
    return "; ".join(f"{design} design: {verdict}" for design, verdict in said.items())


def text_gate_value(path: Path) -> float:
    """Unigram minus held-out loss of a text specimen, bits/byte."""
    per_example = pd.read_csv(path / EVAL_FILE)
    params = load_metrics(path)["train_config"]["task_params"]
    loss = float(per_example["nats"].sum() / per_example["targets"].sum())
    return (tasks.get("text", **params).unigram_loss() - loss) / math.log(2)


def _distances(path: str, scale: float) -> pd.DataFrame:
    """One LRT text specimen's loss increase (nats) by ablated position and distance."""
    model = load_checkpoint(path)
    metrics = load_metrics(path)
    batch = tasks.get("text", **metrics["train_config"]["task_params"]).sample(max(4, int(TEXT_N * min(1.0, scale))),
                                                                                EVAL_SEED, "val")
    frame = ablation_by_distance(model, batch.tokens, MAX_DISTANCE, targets=batch.targets, kind="mean",
                                 schedule="sequential", batch_size=1024)
    frame["run"], frame["seed"] = Path(path).name, int(metrics.get("seed", 0))
    return frame


def _distance_table(root: Path, scale: float, jobs: int = 1) -> tuple[pd.DataFrame, dict[str, float]]:
    """``_distances`` of each current, gated LRT text specimen, and every gate value."""
    specs = {spec.name: spec for spec in
             text_arms.text_runs(("baseline", "lrt_interleaved"), scale) if spec.name.startswith(TEXT_PREFIX)}
    names = [name for name, spec in specs.items() if up_to_date(root / TEXT_SPECIMENS / name, spec)]
    gate_values = {name: text_gate_value(root / TEXT_SPECIMENS / name) for name in names}
    calls = [(str(root / TEXT_SPECIMENS / name), scale) for name in names if gate_values[name] >= TEXT_MARGIN]
    frames = map_jobs(_distances, calls, jobs, desc="text specimens")
    return (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()), gate_values


DISTANCE_COLUMNS = ["distance", "increase", "low", "high", "seeds"]


def distance_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per distance: mean loss increase, interval over seeds, then windows."""
    rows = []
    for d, at in frame.groupby("distance"):
        per_example = at.groupby(["run", "example"])["increase"].mean()
        arrays = [per_example[run].to_numpy() for run in sorted(at["run"].unique())]
        zeros = [np.zeros_like(a) for a in arrays]
        interval = hierarchical_difference(zeros, arrays, seed=int(d))
        rows.append({"distance": int(d), "increase": interval["mean"], "low": interval["low"],
                     "high": interval["high"], "seeds": len(arrays)})
    return pd.DataFrame(rows, columns=DISTANCE_COLUMNS)


DECIDING = ("swap", "control")  # the edits the verdict reads: a swap flips more answers than a same-label control


def flip_means(rows: pd.DataFrame) -> str:
    """Per design, the mean swap and control flip rates."""
    return "; ".join(f"{d}: swap flips {g['swap_flip'].mean():.0%}, control {g['control_flip'].mean():.0%}"
                     for d, g in rows.groupby("design", sort=False))


def causal_use_figure(swaps: pd.DataFrame, controls: pd.DataFrame, distances: pd.DataFrame):
    """Swap/control flip rates (specimens, positive control) and the LRT ablation by distance."""
    import seaborn as sns
    from matplotlib.figure import Figure

    from ...plots import STYLE, ablation_distance, ablation_takeaway, swap_flips
    from ...plots.base import MAX_WIDTH

    fig = Figure(figsize=(MAX_WIDTH, 14.0), layout="constrained")  # stacked: no part shrunk to fit a cell
    top, control, distance = fig.subfigures(3, 1, height_ratios=(1.0, 0.8, 0.8))
    swap_flips(swaps, kinds=DECIDING, figure=top)
    said = f"\n{flip_means(controls)}" if not controls.empty else ""
    swap_flips(controls, f"positive control: {CONTROLS}'s FBTs, which need their feedback{said}", DECIDING, control)
    with sns.axes_style(STYLE):
        ablation_distance(distances, distance.subplots(1, 2))
    if not distances.empty:
        distance.suptitle(textwrap.fill(f"LRT text: {ablation_takeaway(distances)}", 110), fontsize=10)
    return fig


def _said(r) -> str:
    """One specimen under one design, in words."""
    fed = "suffix1" if r.design == "site" else "pass 2"
    return (f"{r.specimen} {r.design}: swap flips {r.swap_flip:.3f} [{r.swap_low:.3f}, {r.swap_high:.3f}] vs control "
            f"{r.control_flip:.3f}, swap - control [{r.diff_low:+.3f}, {r.diff_high:+.3f}] ("
            + ("degenerate: zero width" if math.isnan(r.power) else f"detects >= {r.power:.3f}") + "), "
            f"cross-context - control [{r.cross_low:+.3f}, {r.cross_high:+.3f}]; plain {r.standard_accuracy:.3f} vs "
            f"{fed} {r.fed_accuracy:.3f} (needed [{r.needed_low:+.3f}, {r.needed_high:+.3f}]) -> {r.verdict}")


def analyze(ctx: Context) -> Outcome:
    root = ctx.out.parent
    swaps, gates = _swap_table(root, ctx.scale, ctx.jobs)
    controls = _control_table(root, ctx.scale, ctx.jobs)
    swaps = with_positive_control(swaps, controls)
    distances, text_gates = _distance_table(root, ctx.scale, ctx.jobs)
    summary = distance_summary(distances) if not distances.empty else pd.DataFrame(columns=DISTANCE_COLUMNS)
    verdicts, words = {}, []
    for task in PROBE_TASKS:
        mine = swaps[swaps["task"] == task] if not swaps.empty else swaps
        missed = gates[(gates["task"] == task) & ~gates["gated"]] if not gates.empty else gates
        skipped = "".join(f"; {specimen_key('', r.scratch_updates, r.seed)} not intervened on ("
                          + (r.note or f"answer accuracy {r.answer_accuracy:.3f} < {COMPETENT}") + ")"
                          for r in missed.itertuples())
        if mine.empty:
            verdicts[task] = "not tested: no gated specimen"
            words.append(f"{task}: no gated specimen{skipped}")
            continue
        verdicts[task] = task_verdict(mine)
        probes = mine.drop_duplicates("specimen")
        words.append(f"{task}: " + "; ".join(_said(r) for r in mine.itertuples()) + "; layer-0 probe " + ", ".join(
            f"{r.specimen} {r.probe_accuracy:.3f} (twin {r.probe_twin_accuracy:.3f})"
            if not math.isnan(r.probe_accuracy) else f"{r.specimen} not recorded by {SPECIMENS}"
            for r in probes.itertuples()) + skipped)
    detects = control_detects(controls)
    words.append(f"positive control ({CONTROLS}): " + ", ".join(
        f"{d} design {'detects' if ok else 'detects no'} use" for d, ok in detects.items())
        + ("; " + "; ".join(_said(r) for r in controls.itertuples()) if not controls.empty else
           f"; no current run of {CONTROLS}"))
    if not summary.empty:
        near = summary.set_index("distance")["increase"]
        words.append(f"LRT text ({int(summary['seeds'].iloc[0])} seeds), mean-ablating the memory read d back: "
                     + ", ".join(f"d={d} {near[d]:+.4f}" for d in (1, 2, 4, 8, MAX_DISTANCE) if d in near)
                     + " nats")
    else:
        measured = ", ".join(f"{k} {v:.2f}" for k, v in text_gates.items())
        words.append(f"LRT text: no specimen passed its gate ({measured} bits/byte below unigram, needs >= "
                     f"{TEXT_MARGIN})" if text_gates else f"LRT text: no specimen found under {TEXT_SPECIMENS}")
    table = pd.concat([swaps.assign(part="swap"), controls.assign(part="positive control"),
                       summary.assign(part="lrt_distance")], ignore_index=True)
    distances.to_csv(ctx.out / "distances.csv", index=False)  # by position: what the figure's right panels read
    verdict = "; ".join(f"{task}: {v}" for task, v in verdicts.items())
    gated = float(gates["gated"].sum()) if not gates.empty else 0.0
    return Outcome(table, lambda _: causal_use_figure(swaps, controls, distances), "; ".join(words), verdict,
                   {"gated FBT specimens": gated},
                   chance="a control swap (same label) flips what the swap would without reading the label; the "
                          "untrained twin's probe accuracy is the architecture's free lift",
                   extra={"specimen_gates": gates.to_dict("records"), "task_verdicts": verdicts,
                          "text_gates": text_gates, "positive_control": detects,
                          "seeds": sorted(int(s) for s in swaps["seed"].unique()) if not swaps.empty else []})


def finding(summary: dict, results: pd.DataFrame) -> Finding:
    """Per design and verdict: the specimens and the flip rates that decided it."""
    swaps = results[results["part"] == "swap"]
    if swaps.empty:
        return default_finding(summary, results)
    groups = sorted(swaps.groupby(["design", "verdict"], sort=False), key=lambda g: g[0][1].startswith("not tested"))
    said = "; ".join(f"the {design} design ({len(rows)} specimens) " + (
        f"is {verdict}" if verdict.startswith("not tested") else
        f"says {verdict}: swapping the memory for one of the other label flips {rows['swap_flip'].min():.3f}-"
        f"{rows['swap_flip'].max():.3f} of the answers, a same-label swap {rows['control_flip'].min():.3f}-"
        f"{rows['control_flip'].max():.3f}") for (design, verdict), rows in groups)
    tested = swaps[~swaps["verdict"].str.startswith("not tested")]
    ours = (f"swap flips {tested['swap_flip'].min():.3f}-{tested['swap_flip'].max():.3f}" if len(tested) else
            f"not tested on {len(swaps)} of {len(swaps)} specimen designs")
    return Finding(ours, said[0].upper() + said[1:] + ".")


RECIPE = Recipe(
    "causal_use", build=build, analyze=analyze,
    gates=(Gate("gated FBT specimens", f"FBT specimens of {SPECIMENS} whose held-out answer accuracy under suffix1 is "
                f">= {COMPETENT} (the specimens' own gates)", ">=", 1),),
    kind="exploratory", reads=(SPECIMENS, CONTROLS, TEXT_SPECIMENS), finding=finding, **PREREGISTERED)

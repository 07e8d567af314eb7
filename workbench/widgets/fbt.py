"""Front-ends of the FBT notebooks (04-06)."""

from __future__ import annotations

import functools
import html
import math
import re
from collections.abc import Callable, Mapping, Sequence

import ipywidgets as widgets
import pandas as pd
import torch
from matplotlib.figure import Figure

from .. import plots, schedules, tasks
from ..analysis.probes import probe_layers
from ..analysis.regimes import regime_losses
from ..decode import REGIMES, generate
from ..model import GPT
from ..validation import check_int, fail
from .core import Explorer, format_number


def regime_explorer(model: GPT, tokens: torch.Tensor, prompt_len: int, decode: Callable[[Sequence[int]], str],
                    max_prefill_passes: int = 8, floor: float | None = None,
                    floor_label: str = "unigram") -> Explorer:
    """What the model writes per regime after ``prompt_len`` tokens; the rest scored against STANDARD."""
    if tokens.ndim != 2 or tokens.size(0) != 1:
        raise ValueError(f"tokens must be (1, T), got {tuple(tokens.shape)}")
    T = tokens.size(1)
    check_int("prompt_len", prompt_len, 1, T - 1)
    check_int("max_prefill_passes", max_prefill_passes, 1)
    plots.training.check_floor(floor)
    prompt, new = tokens[:, :prompt_len], T - prompt_len
    standard = regime_losses(model, tokens, prompt_len, ("standard",))
    controls = {
        "regime": widgets.Dropdown(options=list(REGIMES), value="soft", description="regime"),
        "prefill_passes": widgets.IntSlider(value=1, min=1, max=max_prefill_passes, description="prefill passes",
                                            continuous_update=False),
    }

    def render(regime: str, prefill_passes: int) -> tuple[Figure, str]:
        out, logits = generate(model, prompt, new, regime=regime, prefill_passes=prefill_passes, return_logits=True)
        written = out[0, prompt_len:]
        log_probs = logits[0].double().log_softmax(-1).gather(-1, written[:, None])
        scored = regime_losses(model, tokens, prompt_len, (regime,), prefill_passes)
        frame = scored if regime == "standard" else pd.concat([standard, scored], ignore_index=True)
        passes = (f", {prefill_passes} fused prefill pass(es)" if regime == "fused"
                  else " (prefill passes apply to fused only)")
        summary = (f"<b>{regime}</b>{passes}<br>"
                   f"prompt: <code>{html.escape(repr(decode(prompt[0].tolist())))}</code><br>"
                   f"writes: <code>{html.escape(repr(decode(written.tolist())))}</code> "
                   f"(mean log-likelihood {format_number(float(log_probs.mean()))} nats/token)<br>"
                   f"real continuation: <code>{html.escape(repr(decode(tokens[0, prompt_len:].tolist())))}</code>; "
                   f"its loss under {regime} {format_number(float(scored['loss'].mean()))} nats/token "
                   f"(standard {format_number(float(standard['loss'].mean()))})")
        return plots.regime_losses(frame, title=plots.regime_takeaway(frame), floor=floor,
                                   floor_label=floor_label), summary

    return Explorer(controls, render)


def probe_compute(models: Mapping[str, Mapping[str, GPT]], conditions: Sequence[str], n: int = 96,
                  seed: int = 0) -> Callable[[str, str], pd.DataFrame]:
    """``probe_explorer``'s compute: a task's first call probes all its models and conditions at once."""
    if not models or any(not labelled for labelled in models.values()):
        raise ValueError("models must map a task to a non-empty {label: model} dict")
    unknown = sorted(set(models) - set(tasks.names()))
    if unknown:
        raise ValueError(f"models names unknown tasks {unknown}; tasks are {tasks.names()}")
    if not conditions:
        raise ValueError(f"conditions={list(conditions)!r} must name at least one condition")
    for condition in conditions:
        schedules.condition(condition)
    check_int("n", n, 8)  # 4 grouped folds need several groups

    @functools.cache
    def probed(task: str) -> pd.DataFrame:
        return pd.concat([probe_layers(model, tasks.get(task), tuple(conditions), n=n, seed=seed,
                                       random_baseline=False).assign(model=label)
                          for label, model in models[task].items()], ignore_index=True)

    def compute(task: str, condition: str) -> pd.DataFrame:
        if task not in models:
            fail("task", task, f"models are given for {sorted(models)}")
        if condition not in conditions:
            fail("condition", condition, f"must be one of {list(conditions)}")
        table = probed(task)
        return table[table["condition"] == condition].reset_index(drop=True)

    return compute


MAX_RUNS_SHOWN = 6  # lines a panel can hold and still be read


def run_views(names: Sequence[str]) -> dict[str, list[str]]:
    """``all`` runs if they fit a panel, else a group per seed (an unseeded run joins each)."""
    if len(names) <= MAX_RUNS_SHOWN:
        return {"all": list(names)}
    seeds = {name: m[1] for name in names if (m := re.search(r"_s(\d+)$", name))}
    return {f"every arm, seed {seed}": [n for n in names if seeds.get(n, seed) == seed]
            for seed in sorted(set(seeds.values()), key=int)}


def window_takeaway(runs: Mapping[str, pd.DataFrame], pass_: int, decimals: int = 2) -> str:
    """Each run's loss change from pass 2 to ``pass_`` (the feedback mixes' late-pass rise); equal at
    ``decimals`` places, runs tie and are said together."""
    changes, ended = {}, []
    for name, frame in runs.items():
        loss = frame.set_index("pass")["loss"]
        if pass_ not in loss.index or pd.isna(loss.get(pass_)):
            ended.append(f"{name} ends at pass {int(loss.index.max())}")
        elif pass_ < 2:
            changes[name] = float(loss[pass_])
        elif 2 in loss.index and pd.notna(loss[2]):
            changes[name] = float(loss[pass_] - loss[2])
        else:
            ended.append(f"{name} has no pass-2 loss")
    changes = {name: round(value, decimals) + 0.0 for name, value in changes.items()}  # + 0.0: never "-0.00"
    sign = "+" if pass_ >= 2 else ""
    said = f"pass {pass_}: " + ("loss" if pass_ < 2 else "loss since pass 2")
    if len(changes) > 1 and len(set(changes.values())) == 1:
        value = next(iter(changes.values()))
        parts = [f"{value:{sign}.{decimals}f} in every run ({', '.join(changes)}): they tie"]
    else:
        parts = [f"{name} {value:{sign}.{decimals}f}" for name, value in changes.items()]
    return f"{said} — " + ", ".join(parts + ended) if parts or ended else said


def pass_window_explorer(dynamics: pd.DataFrame, seq_len: int, from_position: int,
                         depths: Mapping[str, int], chance: Mapping[str, float] | None = None) -> Explorer:
    """Jacobi passes of stacked ``pass_dynamics`` runs over t >= ``from_position``; ``depths``: label -> depth."""
    missing = sorted({"run", "pass", "delta", "fixed_point_distance", "loss", "exact_by_causality"}
                     - set(dynamics.columns))
    if missing or dynamics.empty:
        raise ValueError(f"dynamics (stacked pass_dynamics) is empty or lacks {missing}")
    check_int("seq_len", seq_len, 2)
    check_int("from_position", from_position, 0, seq_len - 1)
    runs = {name: frame.drop(columns="run") for name, frame in dynamics.groupby("run", sort=False)}
    views = run_views(list(runs))
    last = int(dynamics["pass"].max())
    controls = {
        "run": widgets.Dropdown(options=[*views, *runs], value=next(iter(views)), description="run"),
        "pass_": widgets.IntSlider(value=min(last, 30), min=1, max=last, description="pass", continuous_update=False),
    }

    def render(run: str, pass_: int) -> tuple[Figure, str]:
        shown = {name: runs[name] for name in views[run]} if run in views else {run: runs[run]}
        note = (f"{window_takeaway(shown, pass_)}\nover positions t >= {from_position} of T = {seq_len} "
                f"(not exact by causality before pass {from_position + 1})")
        figure = plots.contraction_curves(shown, max_pass=pass_, depths=depths, note=note, chance=chance)
        lines = []
        for name, frame in shown.items():
            by_pass = frame.set_index("pass")
            if pass_ not in by_pass.index:
                lines.append(f"<b>{html.escape(name)}</b>: ends at pass {int(by_pass.index.max())}")
                continue
            row = by_pass.loc[pass_]
            rise = row["loss"] - by_pass.loc[2, "loss"] if 2 in by_pass.index else math.nan
            lines.append(f"<b>{html.escape(name)}</b>: residual {format_number(row['delta'])}, distance to fixed point "
                         f"{format_number(row['fixed_point_distance'])}, loss {format_number(row['loss'])} "
                         f"({'+' if rise >= 0 else ''}{format_number(rise)} since pass 2), "
                         f"exact by causality {format_number(row['exact_by_causality'])}")
        return figure, f"pass {pass_} of {last}<br>" + "<br>".join(lines)

    return Explorer(controls, render)

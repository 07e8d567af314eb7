"""Front-ends of the FBT notebooks (04 latent feedback, 05 probing layer 0, 06 contraction).

- ``regime_explorer(model, tokens, prompt_len, decode)``: decoding regime and prefill passes over one
  held-out text: the continuation the model writes, and how well each regime predicts the real one;
- ``probe_compute(models, conditions)``: the on-demand compute function ``probe_explorer`` needs,
  probing several trained models of a task at once and keeping the results.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence

import ipywidgets as widgets
import pandas as pd
import torch
from matplotlib.figure import Figure

from .. import plots, tasks
from ..analysis.fusion import regime_losses
from ..analysis.probes import parse_condition, probe_layers
from ..decode import REGIMES, generate
from ..model import GPT
from .core import Explorer, _fmt


def regime_explorer(model: GPT, tokens: torch.Tensor, prompt_len: int, decode: Callable[[Sequence[int]], str],
                    max_prefill_passes: int = 8) -> Explorer:
    """Pick a decoding regime (and FUSED's prefill passes); read what the model writes after a prompt.

    ``tokens`` (1, T): a held-out text; its first ``prompt_len`` tokens are the prompt and the rest
    the real continuation. The summary shows the prompt, the greedy continuation under the regime
    (``decode(ids)`` turns ids into text), its mean log-likelihood under the model, and the loss of
    the *real* continuation scored the way that regime computes (``analysis.fusion.regime_losses``),
    next to STANDARD's. The figure: that loss per position, the regime against STANDARD.
    """
    if tokens.ndim != 2 or tokens.size(0) != 1:
        raise ValueError(f"tokens must be one sequence of shape (1, T), got {tuple(tokens.shape)}")
    T = tokens.size(1)
    if isinstance(prompt_len, bool) or not isinstance(prompt_len, int) or not 1 <= prompt_len < T:
        raise ValueError(f"prompt_len={prompt_len!r} is invalid: must be an int in [1, {T - 1}]")
    if isinstance(max_prefill_passes, bool) or not isinstance(max_prefill_passes, int) or max_prefill_passes < 1:
        raise ValueError(f"max_prefill_passes={max_prefill_passes!r} is invalid: must be an int >= 1")
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
                   f"(mean log-likelihood {_fmt(float(log_probs.mean()))} nats/token)<br>"
                   f"real continuation: <code>{html.escape(repr(decode(tokens[0, prompt_len:].tolist())))}</code>; "
                   f"its loss under {regime} {_fmt(float(scored['loss'].mean()))} nats/token "
                   f"(standard {_fmt(float(standard['loss'].mean()))})")
        return plots.regime_losses(frame), summary

    return Explorer(controls, render)


def probe_compute(models: Mapping[str, Mapping[str, GPT]], conditions: Sequence[str], n: int = 96,
                  seed: int = 0) -> Callable[[str, str], pd.DataFrame]:
    """``compute(task, condition)`` for ``probe_explorer``: probe every model of ``task`` at every depth.

    ``models``: task name -> {label: model}, e.g. ``{"delayed_memory": {"baseline": m0, "FBT": m1}}``.
    The first request for a task probes all its models under all ``conditions`` at once (the
    conditions share their forwards: ``analysis.probe_layers``) on ``n`` held-out examples drawn
    with ``seed``, and keeps the table; later requests only filter it. Rows carry the model's label
    in ``model``. No random-init baseline (the explorer compares trained models).
    """
    if not models or any(not labelled for labelled in models.values()):
        raise ValueError("models must map at least one task name to a non-empty {label: model} dict")
    unknown = sorted(set(models) - set(tasks.names()))
    if unknown:
        raise ValueError(f"models names unknown task(s) {unknown}; tasks are {tasks.names()}")
    if not conditions:
        raise ValueError(f"conditions={list(conditions)!r} must name at least one condition")
    for condition in conditions:
        parse_condition(condition)
    if isinstance(n, bool) or not isinstance(n, int) or n < 8:
        raise ValueError(f"n={n!r} is invalid: must be an int >= 8 (4 grouped folds need several groups)")
    kept: dict[str, pd.DataFrame] = {}

    def compute(task: str, condition: str) -> pd.DataFrame:
        if task not in models:
            raise ValueError(f"task={task!r} is invalid: models are given for {sorted(models)}")
        if condition not in conditions:
            raise ValueError(f"condition={condition!r} is invalid: must be one of {list(conditions)}")
        if task not in kept:
            frames = []
            for label, model in models[task].items():
                frame = probe_layers(model, tasks.get(task), tuple(conditions), n=n, seed=seed,
                                     random_baseline=False)
                frames.append(frame.assign(model=label))
            kept[task] = pd.concat(frames, ignore_index=True)
        table = kept[task]
        return table[table["condition"] == condition].reset_index(drop=True)

    return compute

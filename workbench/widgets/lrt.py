"""Front-ends of notebooks 00-03: schedules, the KV cache, the LRT mechanism."""

from __future__ import annotations

import functools
import html
import time
from collections.abc import Callable, Mapping

import ipywidgets as widgets
import pandas as pd
import torch
from matplotlib.figure import Figure

from .. import plots, schedules
from ..analysis.cache import run_with_cache
from ..analysis.lrt_state import lrt_gates, lrt_layer_stats
from ..analysis.schedule_agreement import (
    PARAMETERS,
    exact_logits,
    position_distance,
    schedule_sweep,
)
from ..model import GPT
from .core import Explorer, format_number


def _slider(name: str, value: int, maximum: int) -> widgets.IntSlider:
    return widgets.IntSlider(value=min(value, maximum), min=1, max=maximum, description=name,
                             continuous_update=False)


# ---------------------------------------------------------------------------------------------- schedules
def _seconds(model: GPT, idx: torch.Tensor, schedule: schedules.Schedule) -> float:
    """Wall-clock of one no-grad run: small forwards cost more per FLOP."""
    start = time.perf_counter()
    with torch.no_grad():
        schedule.run(model, idx)
    return time.perf_counter() - start


def schedule_explorer(model: GPT, idx: torch.Tensor, targets: torch.Tensor | None = None,
                      floor: float | None = None, floor_label: str = "unigram") -> Explorer:
    """Each schedule's closeness to the exact recurrence and cost (swept once)."""
    reference = exact_logits(model, idx)
    T = idx.size(1)
    sweeps = pd.concat([schedule_sweep(model, idx, s, targets=targets, reference=reference) for s in PARAMETERS],
                       ignore_index=True)
    single_flops = schedules.Single().flops(model, *idx.shape)
    controls = {"passes": _slider("K passes", 2, T), "subsets": _slider("S subsets", 2, T),
                "block": _slider("B block", 4, T)}

    def render(passes: int, subsets: int, block: int) -> tuple[Figure, str]:
        chosen = [schedules.Multipass(passes), schedules.Interleaved(subsets), schedules.Blockwise(block)]
        rows, positions, seconds = [], {}, []
        for value in chosen:
            rows.append(sweeps[(sweeps["schedule"] == value.name) & (sweeps["value"] == value.knob)].iloc[0])
            positions[value.label] = position_distance(model, idx, value, reference)
            seconds.append(_seconds(model, idx, value))
        loss_head = "<th>loss</th>" if targets is not None else ""
        body = "".join(
            f"<tr><td><b>{html.escape(r['label'])}</b></td><td>{format_number(r['distance'])}</td>"
            f"<td>{r['agreement']:.1%}</td>" + (f"<td>{format_number(r['loss'])}</td>" if targets is not None else "")
            + f"<td>{r['forwards']}</td><td>{r['token_forwards']}</td>"
            f"<td>{r['train_flops'] / single_flops:.3g}x</td><td>{1000 * t:.0f} ms</td></tr>"
            for r, t in zip(rows, seconds))
        floor_line = (f"<br>{html.escape(floor_label)} loss {format_number(floor)}: the floor every loss above is read "
                      "against" if floor is not None and targets is not None else "")
        summary = (f"<table><tr><th>setting</th><th>distance to exact</th><th>argmax agrees</th>{loss_head}"
                   f"<th>forwards</th><th>positions computed</th><th>training FLOPs vs 1 pass</th>"
                   f"<th>wall-clock here</th></tr>{body}"
                   f"</table>exact sequential: {T} forwards of one position each (T = {T}){floor_line}")
        return plots.schedule_distance(sweeps, positions, {v.name: v.knob for v in chosen}), summary

    return Explorer(controls, render)


# ---------------------------------------------------------------------------------------------- KV cache
def kv_cache_explorer(model: GPT, idx: torch.Tensor, decode: Callable[[int], str] | None = None) -> Explorer:
    """The KV cache filling over one exact decode of ``idx[0]``."""
    if idx.ndim != 2:
        raise ValueError(f"idx must be (B, T), got {tuple(idx.shape)}")
    tokens = idx[:1]
    T = tokens.size(1)
    c = model.config
    _, cache = run_with_cache(model, tokens, "sequential",
                              names_filter=lambda n: n.endswith("attn.hook_pattern") or n.endswith("attn.hook_k"))
    names = [decode(int(t)) if decode else str(int(t)) for t in tokens[0]]
    bytes_per_position = 2 * c.n_layer * c.kv_dim * model.wte.weight.element_size()  # K and V, every layer
    controls = {"position": widgets.IntSlider(value=0, min=0, max=T - 1, description="step t",
                                              continuous_update=False),
                "layer": widgets.IntSlider(value=0, min=0, max=c.n_layer - 1, description="layer",
                                           continuous_update=False),
                "head": widgets.IntSlider(value=0, min=0, max=c.n_head - 1, description="head",
                                          continuous_update=False)}

    def render(position: int, layer: int, head: int) -> tuple[Figure, str]:
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"][0, head].double().cpu().numpy()
        keys = cache[f"blocks.{layer}.attn.hook_k"][0, head // (c.n_head // c.kv_heads)].double().cpu().numpy()
        row = pattern[position, : position + 1]
        top = row.argsort()[::-1][:3]
        reads = ", ".join(f"t={int(j)} {html.escape(repr(names[j]))} ({row[j]:.2f})" for j in top)
        summary = (f"<b>step t = {position}</b>, token {html.escape(repr(names[position]))}: the cache holds "
                   f"{position + 1} of {T} positions ({(position + 1) * bytes_per_position:,} bytes of keys and "
                   f"values over {c.n_layer} layers); this step computes 1 new position.<br>"
                   f"layer {layer}, head {head} attends most to {reads}")
        return plots.kv_cache_step(pattern, keys, position, [f"{i} {n!r}" for i, n in enumerate(names)]), summary

    return Explorer(controls, render)


# ---------------------------------------------------------------------------------------------- LRT runs
def lrt_run_explorer(models: Mapping[str, GPT], idx: torch.Tensor,
                     metrics: Mapping[str, Mapping] | None = None, metric: str = "accuracy") -> Explorer:
    """A trained LRT run's source, scales, gates (measured on first view) and ``metric``."""
    if not models:
        raise ValueError("models is empty")
    controls = {"run": widgets.Dropdown(options=list(models), description="run")}

    @functools.cache
    def measured(run: str) -> tuple[pd.DataFrame, pd.DataFrame]:
        return lrt_layer_stats(models[run], idx), lrt_gates(models[run], idx)

    def render(run: str) -> tuple[Figure, str]:
        model = models[run]
        stats, gates = measured(run)
        c = model.config
        source = int(stats.loc[stats["source"], "layer"].iloc[0])
        where = "the top block (after the final norm)" if c.lrt_source_layer == -1 else f"block {source}"
        recorded = ""
        if metrics is not None and run in metrics:
            m = metrics[run]
            schedule = m.get("eval_schedule", {}).get("schedule", "?")
            recorded = (f"<br>recorded {html.escape(metric)} ({html.escape(schedule)} decoding): "
                        f"<b>{format_number(m['eval'][metric])}</b>")
        summary = (f"<b>{html.escape(run)}</b>: memory read from {where} of {c.n_layer}; inject "
                   f"{' + '.join(c.lrt_inject)}, {c.lrt_projection} projection; mean gamma "
                   f"{format_number(stats['gamma'].mean())}, mean feedback gate "
                   f"{format_number(stats['gate_feedback'].mean())}"
                   f"{recorded}")
        return plots.lrt_mechanism(stats, gates, title=f"{run}: {plots.gate_takeaway(stats)}",
                                   gamma_init=c.lrt_gamma_init), summary

    return Explorer(controls, render)


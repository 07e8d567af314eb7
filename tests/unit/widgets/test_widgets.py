"""Widgets, headless: setting a control's value redraws the summary and the figure to match it."""

from __future__ import annotations

import ipywidgets
import matplotlib
import numpy as np
import pandas as pd
import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg

from conftest import perturbed_model, small_config
from workbench import plots, widgets
from workbench.analysis import memory_trajectory, pass_dynamics
from workbench.widgets import core  # noqa: F401

T = 6


@pytest.fixture(scope="module")
def idx() -> torch.Tensor:
    return torch.randint(0, 23, (2, T), generator=torch.Generator().manual_seed(3))


@pytest.fixture(scope="module")
def fbt_model():
    return perturbed_model(small_config("fbt"))


@pytest.fixture(scope="module")
def dynamics(idx, fbt_model) -> dict[str, pd.DataFrame]:
    return {"fbt": pass_dynamics(fbt_model, idx, passes=8, targets=idx),
            "lrt": pass_dynamics(perturbed_model(small_config("lrt")), idx, passes=5)}


def test_contraction_explorer_follows_the_pass_slider_and_run_menu(dynamics):
    explorer = widgets.contraction_explorer(dynamics)
    assert isinstance(explorer, ipywidgets.VBox) and explorer.summary in explorer.children
    assert "<b>fbt</b>, pass 8:" in explorer.summary.value
    first_image = explorer.image.value
    explorer.controls["pass_"].value = 3
    row = dynamics["fbt"].iloc[2]
    assert "pass 3:" in explorer.summary.value
    shown = widgets.core.format_number(row["fixed_point_distance"])
    assert f"distance to fixed point {shown}" in explorer.summary.value
    assert f"loss {widgets.core.format_number(row['loss'])}" in explorer.summary.value
    assert list(explorer.figure.axes[1].lines[0].get_xdata()) == [1, 2, 3]
    assert explorer.image.value != first_image
    explorer.controls["run"].value = "lrt"
    assert "<b>lrt</b>, pass 3:" in explorer.summary.value and "loss —" in explorer.summary.value
    assert len(explorer.figure.axes) == 2  # this run has no loss panel
    explorer.controls["pass_"].value = 8
    assert "pass 5 (the run ends at pass 5)" in explorer.summary.value
    assert explorer.controls["pass_"].continuous_update is False


def test_contraction_explorer_rejects_empty_results():
    with pytest.raises(ValueError, match="results"):
        widgets.contraction_explorer({})


def _probe_rows(task: str, condition: str) -> pd.DataFrame:
    base = {"memory": 0.5, "completion": 0.6}[task] + {"standard": 0.0, "sequential": 0.3}[condition]
    layers = np.arange(5 if task == "memory" else 3)
    return pd.DataFrame(dict(condition=condition, layer=layers, accuracy=base + 0.01 * layers, accuracy_std=0.01,
                             control_accuracy=0.5, selectivity=base - 0.5 + 0.01 * layers, majority=0.5,
                             model="trained", task=task))


def test_probe_explorer_computes_on_demand_and_follows_depth():
    calls: list[tuple[str, str]] = []

    def compute(task: str, condition: str) -> pd.DataFrame:
        calls.append((task, condition))
        return _probe_rows(task, condition)

    explorer = widgets.probe_explorer(compute, tasks=["memory", "completion"], conditions=["standard", "sequential"])
    assert calls == [("memory", "standard")]
    depth = explorer.controls["depth"]
    assert depth.max == 4 and "accuracy 0.5 " in explorer.summary.value
    depth.value = 3
    assert "depth 3" in explorer.summary.value and "accuracy 0.53 " in explorer.summary.value
    assert explorer.figure.axes[0].lines[-1].get_xdata()[0] == 3  # the highlighted depth
    explorer.controls["condition"].value = "sequential"
    assert "accuracy 0.83 " in explorer.summary.value
    explorer.controls["task"].value = "completion"  # only 3 depths: the slider shrinks and clamps
    assert depth.max == 2 and depth.value == 2 and "depth 2" in explorer.summary.value
    explorer.controls["task"].value = "memory"
    assert calls == [("memory", "standard"), ("memory", "sequential"), ("completion", "sequential")]
    with pytest.raises(ValueError, match="tasks"):
        widgets.probe_explorer(compute, tasks=[], conditions=["standard"])


def test_token_stepper_shows_what_each_position_reads_and_predicts(fbt_model, idx):
    explorer = widgets.token_stepper(fbt_model, idx, decode=lambda i: chr(97 + i), top_k=3)
    assert "reads no memory" in explorer.summary.value
    trajectory = memory_trajectory(fbt_model, idx, top_k=3)
    explorer.controls["position"].value = 4
    row = trajectory[(trajectory.example == 0) & (trajectory.position == 4)].iloc[0]
    summary = explorer.summary.value
    assert "<b>t = 4</b>" in summary and "reads m<sub>3</sub>" in summary
    assert f"= {widgets.core.format_number(row['cosine_prev'])}" in summary
    assert f"&#x27;{chr(97 + row['top_tokens'][0])}&#x27; {row['top_probs'][0]:.2f}" in summary
    assert explorer.figure.axes[0].lines[1].get_xdata()[0] == 4
    explorer.controls["example"].value = 1
    other = trajectory[(trajectory.example == 1) & (trajectory.position == 4)].iloc[0]
    assert f"= {widgets.core.format_number(other['cosine_prev'])}" in explorer.summary.value
    single = widgets.token_stepper(fbt_model, idx[:1])
    assert list(single.controls) == ["position"]


def test_probe_explorer_opens_on_the_view_it_is_given():
    explorer = widgets.probe_explorer(_probe_rows, tasks=["memory", "completion"],
                                      conditions=["standard", "sequential"], condition="sequential", depth=2)
    assert "sequential, depth 2" in explorer.summary.value and "accuracy 0.82 " in explorer.summary.value
    explorer.controls["depth"].value = 0
    assert "accuracy 0.8 " in explorer.summary.value  # and it still follows its slider
    with pytest.raises(ValueError, match="condition="):
        widgets.probe_explorer(_probe_rows, tasks=["memory"], conditions=["standard"], condition="suffix9")


def test_the_figure_shows_at_its_natural_size_and_the_summary_wraps(dynamics):
    explorer = widgets.contraction_explorer(dynamics)
    width, height = core.png_size(explorer.image.value)
    dpi, fig = explorer.dpi, explorer.figure
    box = fig.get_tightbbox(FigureCanvasAgg(fig).get_renderer()).padded(matplotlib.rcParams["savefig.pad_inches"])
    assert abs(width - box.width * dpi) <= 2 and abs(height - box.height * dpi) <= 2  # the drawn box, at its dpi
    assert explorer.image.layout.width == f"{width}px" and explorer.image.layout.max_width == "100%"
    assert explorer.image.layout.height == "auto"  # never stretched to the cell, shrunk to fit a narrow one
    assert explorer.summary.value.startswith(f"<style>{core.SUMMARY_CSS}</style><div class=\"wb-summary\">")
    assert "overflow-x:auto" in core.SUMMARY_CSS and "padding" in core.SUMMARY_CSS  # tables scroll, cells apart
    explorer.controls["run"].value = "lrt"  # another figure (no loss panel): the width follows it
    assert explorer.image.layout.width == f"{core.png_size(explorer.image.value)[0]}px" != f"{width}px"


def test_the_static_twin_is_the_outputs_fallback_not_a_second_output(dynamics, monkeypatch):
    import IPython.display

    shown: list[tuple[tuple, dict]] = []
    monkeypatch.setattr(IPython.display, "display", lambda *objs, **kw: shown.append((objs, kw)))
    explorer = widgets.contraction_explorer(dynamics)
    widgets.with_static_twin(explorer)
    ((objs, kw),) = shown  # one output, not the widget and a frozen figure under it
    (bundle,) = objs
    assert kw == {"raw": True}
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == explorer.model_id
    import base64

    assert base64.b64decode(bundle["image/png"]) == explorer.image.value
    assert explorer.summary.value in bundle["text/html"] and "data:image/png;base64," in bundle["text/html"]
    assert f'width="{core.png_size(explorer.image.value)[0]}"' in bundle["text/html"]
    explorer.controls["pass_"].value = 2  # the twin is the default view; the live widget moves on
    assert "pass 2:" in explorer.summary.value and "pass 2:" not in bundle["text/html"]


def test_contraction_explorer_titles_the_takeaway_and_draws_chance(dynamics):
    explorer = widgets.contraction_explorer(dynamics, chance={"chance 1.5": 1.5})
    run = explorer.controls["run"].value
    assert explorer.figure.get_suptitle() == f"{run}: {plots.contraction_takeaway({run: dynamics[run]})}"
    loss_panel = explorer.figure.axes[2]
    assert [line.get_ydata()[0] for line in loss_panel.lines if line.get_label() == "chance 1.5"] == [1.5]


def test_a_legend_outside_the_axes_and_a_long_label_are_shown_whole():
    def render(n: int):
        fig, ax = _figure()
        ax.plot([0, n], [0, 1], label="a line")
        ax.legend(loc="center left", bbox_to_anchor=(1.05, 0.5))
        return fig, "summary"

    explorer = core.Explorer({"n": ipywidgets.IntSlider(value=1, min=1, max=3, description="prefill passes")}, render)
    assert core.png_size(explorer.image.value)[0] > explorer.figure.get_size_inches()[0] * explorer.dpi
    assert explorer.controls["n"].style.description_width == "initial"


def _figure():
    from matplotlib.figure import Figure

    fig = Figure(figsize=(3, 2))
    return fig, fig.add_subplot()

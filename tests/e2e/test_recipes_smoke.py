"""Every recipe end to end at smoke scale: trains, writes its results, is up to date afterwards, and
RESULTS.md shows it.

The heavy ones run from files of their own, so that pytest-xdist's ``--dist loadfile`` spreads them over the
workers instead of queueing every recipe on one: ``fixed_point_study`` (the longest, about 15 minutes on one
core) from ``test_recipes_smoke_fixed_point.py``, the other two FBT studies (``HEAVY``) from
``test_recipes_smoke_fbt.py``, the four LRT ablations on language from ``test_recipes_smoke_lrt_ablation.py``,
FBT on language and its readers from ``test_recipes_smoke_fbt_text.py``. That a second ``reproduce`` trains
nothing and reaches the same numbers is the runner's property, checked end to end once, on a recipe that trains
(``test_a_second_reproduce_...``); for every recipe the check is that each of its runs is reusable as saved.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_recipes_smoke_fbt_text import TEXT_RECIPES
from test_recipes_smoke_lrt_ablation import ABLATIONS

from workbench import experiments as E
from workbench.checkpoint import load_metrics
from workbench.experiments.runs import reusable

HEAVY = ("fbt_pass_mixes", "fbt_pass_mixes_registers", "fixed_point_study")
LONGEST = "fixed_point_study"  # one of HEAVY, alone in its file


def check_recipe(tmp_path: Path, name: str) -> E.Outcome:
    """Reproduce ``name`` at smoke scale under ``tmp_path`` and check what it wrote."""
    outcome = E.reproduce(name, root=tmp_path / "ck", scale=E.smoke_scale(), scratch=tmp_path / "runs")
    out = tmp_path / "ck" / name
    assert (out / "results.csv").is_file() and (out / "results.png").stat().st_size > 1000
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verdict"] == outcome.verdict and summary["number"] == outcome.number
    assert {g["name"] for g in summary["gates"]} == {g.name for g in E.RECIPES[name].gates}
    for run in summary["runs"]:
        assert (out / run / "model.safetensors").is_file() and (out / run / "history.csv").is_file()
        assert load_metrics(out / run)["recipe"] == name and "eval_float64" in load_metrics(out / run)
    # up to date: every run of the recipe is one a second reproduce would load instead of training
    stale = [s.name for s in E.RECIPES[name].build(E.smoke_scale()) if not reusable(out / s.name, s)]
    assert not stale, stale
    text = E.write_results_md(tmp_path / "ck", tmp_path / "RESULTS.md")
    assert name in text and outcome.verdict in text
    for specimen in summary.get("specimens", []):  # a recipe that gates each specimen shows every gate's value
        assert f"| {specimen['gate']} | {specimen['gate_condition']} | {specimen['gate_value']:.3f} |" in text
    return outcome


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(E.RECIPES) - set(HEAVY) - set(ABLATIONS) - set(TEXT_RECIPES)))
def test_recipe_smoke(tmp_path, name):
    check_recipe(tmp_path, name)


@pytest.mark.slow
def test_a_second_reproduce_trains_nothing_and_reaches_the_same_numbers(tmp_path):
    first = check_recipe(tmp_path, "lrt_memory_sanity")
    out = tmp_path / "ck" / "lrt_memory_sanity"
    saved = {run: (out / run / "model.safetensors").stat().st_mtime_ns
             for run in json.loads((out / "summary.json").read_text())["runs"]}
    again = E.reproduce("lrt_memory_sanity", root=tmp_path / "ck", scale=E.smoke_scale(), scratch=tmp_path / "runs")
    assert again.number == first.number and again.verdict == first.verdict
    assert saved and {run: (out / run / "model.safetensors").stat().st_mtime_ns for run in saved} == saved


def test_the_heavy_recipes_exist():
    """A renamed FBT study would otherwise drop out of both smoke files without a failure."""
    assert set(HEAVY) <= set(E.RECIPES)

"""FBT on language at smoke scale, in one checkpoint root: ``fbt_text`` trains and scores its specimens, then the
recipes that read those scores (``READERS``) analyse them. In a file of its own so that pytest-xdist's
``--dist loadfile`` gives it a worker; ``test_recipes_smoke`` leaves these recipes to it."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from workbench import experiments as E
from workbench.experiments import fbt_language as lang
from workbench.experiments.runs import reusable

READERS = ("fbt_regimes", "fbt_prefill_gain", "fbt_fixed_point_text")
TEXT_RECIPES = (lang.SPECIMENS, *READERS)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fbt_text")
    for name in TEXT_RECIPES:
        E.reproduce(name, root=root / "ck", scale=E.smoke_scale(), scratch=root / "runs")
    E.write_results_md(root / "ck", root / "RESULTS.md")
    return root


@pytest.mark.slow
@pytest.mark.parametrize("name", TEXT_RECIPES)
def test_text_recipe_smoke(root, name):
    recipe, out = E.RECIPES[name], root / "ck" / name
    summary = json.loads((out / "summary.json").read_text())
    assert [g["name"] for g in summary["gates"]] == [g.name for g in recipe.gates]
    assert all(g["value"] is None or isinstance(g["value"], float) for g in summary["gates"])
    assert (out / "results.png").stat().st_size > 1000
    if name == lang.SPECIMENS:  # the intervals its figure draws, so a redraw draws the same
        assert len(pd.read_csv(out / E.recipes.fbt_text.INTERVALS)) == 3 * len(summary["comparisons"]) + 1
    assert not [s.name for s in recipe.build(E.smoke_scale()) if not reusable(out / s.name, s)]
    text = (root / "RESULTS.md").read_text()
    assert f"## {name}" in text and summary["verdict"] in text
    said = recipe.finding(summary, pd.read_csv(out / "results.csv"))
    assert said.sentence.endswith(".") and "nan" not in said.sentence


@pytest.mark.slow
def test_the_scores_cover_every_run_and_measure_and_are_reused(root):
    out = root / "ck" / lang.SPECIMENS
    scores = pd.read_csv(out / lang.SCORES)
    runs = {s.name for s in E.RECIPES[lang.SPECIMENS].build(E.smoke_scale())}
    assert set(scores["run"]) == runs
    fbt = scores[scores["arm"] == lang.PAPER_ARM]
    assert {"pass1", "pass2", "pass3", "exact", "standard", "soft"} | {f"fused{p}" for p in lang.SMOKE_PREFILL} == set(
        fbt["measure"])
    assert set(scores.loc[scores["arm"] == "base", "measure"]) == {"pass1", "exact", "standard"}
    before = (out / lang.SCORES).stat().st_mtime_ns, scores
    E.reproduce(lang.SPECIMENS, root=root / "ck", scale=E.smoke_scale(), scratch=root / "runs")
    again = pd.read_csv(out / lang.SCORES)  # every row reused: the same weights, the same numbers
    pd.testing.assert_frame_equal(again.sort_values(list(again.columns)).reset_index(drop=True),
                                  before[1].sort_values(list(again.columns)).reset_index(drop=True))


@pytest.mark.slow
def test_the_regimes_write_each_feedback_arms_greedy_continuations(root):
    table = pd.read_csv(root / "ck" / "fbt_regimes" / "continuations.csv")
    scores = pd.read_csv(root / "ck" / lang.SPECIMENS / lang.SCORES)
    assert set(table["arm"]) == set(lang.feedback_arms(scores))
    assert (table.groupby("arm")["regime"].nunique() == 3).all()
    assert (table.groupby(["arm", "regime"]).size() == lang.GREEDY_PROMPTS).all()
    assert table["prompt"].str.len().max() <= lang.PROMPT

"""Every recipe end to end at smoke scale: trains, writes its results, is up to date the second time, and
RESULTS.md shows it."""

from __future__ import annotations

import json

import pytest

from workbench import experiments as E
from workbench.checkpoint import load_metrics


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(E.RECIPES))
def test_recipe_smoke(tmp_path, name):
    outcome = E.reproduce(name, root=tmp_path / "ck", scale=E.smoke_scale(), scratch=tmp_path / "runs")
    out = tmp_path / "ck" / name
    assert (out / "results.csv").is_file() and (out / "results.png").stat().st_size > 1000
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verdict"] == outcome.verdict and summary["number"] == outcome.number
    assert {g["name"] for g in summary["gates"]} == {g.name for g in E.RECIPES[name].gates}
    for run in summary["runs"]:
        assert (out / run / "model.safetensors").is_file() and (out / run / "history.csv").is_file()
        assert load_metrics(out / run)["recipe"] == name and "eval_float64" in load_metrics(out / run)
    # up to date: a second call trains nothing and reaches the same numbers
    again = E.reproduce(name, root=tmp_path / "ck", scale=E.smoke_scale(), scratch=tmp_path / "runs")
    assert again.number == outcome.number
    text = E.write_results_md(tmp_path / "ck", tmp_path / "RESULTS.md")
    assert name in text and outcome.verdict in text
    for specimen in summary.get("specimens", []):  # a recipe that gates each specimen shows every gate's value
        assert f"| {specimen['gate']} | {specimen['gate_condition']} | {specimen['gate_value']:.3f} |" in text

"""The results page shows each recipe's gates, and a failed gate as "not tested", in the table and the explorer."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from workbench import widgets
from workbench.experiments import results_table as results

GATES = [{"name": "baseline learned", "quantity": "accuracy minus chance", "value": 0.03, "op": ">=",
          "threshold": 0.1, "passed": False},
         {"name": "text below unigram", "quantity": "unigram minus loss", "value": 1.4, "op": ">=", "threshold": 0.5,
          "passed": True}]
GATED = {"claim": "LRT beats the baseline.", "setting": "tiny", "number": "+0.01", "scale": 1.0, "kind": "paper",
         "verdict": "not tested: baseline learned = 0.03 (needs >= 0.1)", "gates": GATES, "seeds": [0, 1, 2],
         "rule": "reproduces when the interval lies above 0"}
OLD = {"claim": "c", "setting": "s", "number": "n", "verdict": "inconclusive", "scale": 0.5}
ARMS = pd.DataFrame({"arm": ["a", "b"], "metric": ["accuracy"] * 2, "value": [0.2, 0.3]})


def test_summary_table_counts_gates_and_seeds():
    table = results.summary_table({"gated": GATED, "old": OLD}).set_index("recipe")
    assert list(table.reset_index().columns) == results.SUMMARY_COLUMNS
    assert table.loc["gated", "gates_passed"] == "1 / 2" and table.loc["gated", "seeds"] == 3
    assert table.loc["old", "gates_passed"] == "" and pd.isna(table.loc["old", "seeds"])
    assert table.loc["gated", "kind"] == "paper" and table.loc["old", "kind"] == ""


def test_gates_table_one_row_per_gate():
    gates = results.gates_table({"gated": GATED, "old": OLD})
    assert list(gates.columns) == results.GATE_COLUMNS
    assert gates["gate"].tolist() == ["baseline learned", "text below unigram"]
    assert gates["passed"].tolist() == [False, True] and (gates["recipe"] == "gated").all()
    with pytest.raises(ValueError, match="lacks"):
        results.gates_table({"x": {"claim": "c"}})


def test_recipe_explorer_shows_rule_gates_and_why_not_tested():
    explorer = widgets.recipe_explorer({"gated": GATED, "old": OLD}, {"gated": {"results": ARMS},
                                                                      "old": {"results": ARMS}})
    shown = explorer.summary.value
    assert "a gate failed, so the claim was not tested" in shown
    assert "decision rule: reproduces when the interval lies above 0" in shown
    assert "baseline learned" in shown and "text below unigram" in shown
    explorer.controls["recipe"].value = "old"
    assert "gates (all must pass" not in explorer.summary.value and "not tested" not in explorer.summary.value


def test_load_summaries_names_the_recipes_not_run_yet(tmp_path, monkeypatch):
    from workbench import experiments

    monkeypatch.setenv(experiments.ROOT_ENV, str(tmp_path))
    (tmp_path / "schedules").mkdir()
    (tmp_path / "schedules" / "summary.json").write_text(json.dumps(GATED))
    summaries, missing = results.load_summaries(["schedules", "crosses"])
    assert list(summaries) == ["schedules"] and summaries["schedules"]["verdict"] == GATED["verdict"]
    assert missing == ["crosses"]
    with pytest.raises(ValueError, match="unknown"):
        results.load_summaries(["nope"])

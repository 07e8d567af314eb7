"""The "What we found" table: every recipe's finding is computed from what it wrote, says why when a
competence check failed, and follows the numbers when they change."""

from __future__ import annotations

import copy
import re

import pandas as pd
import pytest

from workbench import experiments as E
from workbench.experiments import core
from workbench.experiments.results_page import FINDINGS_END

SUMMARIES = E.shipped_summaries()
pytestmark = pytest.mark.skipif(not SUMMARIES, reason="no recipe has been reproduced here")


def test_every_shipped_recipe_says_its_finding_in_words():
    table = E.findings_table(SUMMARIES)
    assert list(table.columns) == ["recipe", "kind", "paper", "ours", "verdict", "finding"]
    claims = table[table["kind"] != "extension"]
    assert list(claims["recipe"]) == list(SUMMARIES)
    for row in table.itertuples():
        assert row.ours and row.finding.endswith(".") and "nan" not in row.finding, row.recipe
        if row.kind == "extension":
            continue
        assert bool(row.paper) == (E.RECIPES[row.recipe].kind == "paper"), row.recipe  # ours have no paper number
        if row.verdict == "not tested":
            assert row.finding.startswith("Not tested:") or "not tested" in row.finding, row.recipe
        else:
            assert "Not tested" not in row.finding, row.recipe


def test_a_failed_competence_check_leads_the_sentence_with_its_value():
    summary = {"verdict": "not tested: x learned = 0.02 (needs >= 0.1)", "gates": [
        {"name": "x learned", "quantity": "exact accuracy above chance", "value": 0.0213, "op": ">=",
         "threshold": 0.1, "passed": False},
        {"name": "y learned", "quantity": "the same", "value": 0.5, "op": ">=", "threshold": 0.1, "passed": True}]}
    said = core.default_finding(summary, pd.DataFrame())
    assert said.ours == "not tested"
    assert said.sentence == ("Not tested: x learned (exact accuracy above chance) was 0.0213 where it needs >= 0.1, "
                             "so no verdict is drawn.")
    assert core.short_verdict("a: not tested: feedback not needed; b: not tested: no gated specimen") == "not tested"
    assert core.short_verdict("a: not tested: feedback not needed; b: uses") != "not tested"


@pytest.mark.parametrize("recipe", [r for r in ("lrt_memory_sanity", "reasoning_traces", "schedules")
                                    if r in SUMMARIES])
def test_a_finding_follows_the_numbers(recipe):
    """No number in a finding is typed: change the recorded results and the sentence changes with them."""
    results = E.load_results(recipe)
    before = E.RECIPES[recipe].finding(SUMMARIES[recipe], results)
    changed = results.copy()
    numeric = changed.select_dtypes("number").columns
    changed[numeric] = changed[numeric] * 0.5 + 0.125
    after = E.RECIPES[recipe].finding(copy.deepcopy(SUMMARIES[recipe]), changed)
    assert after.ours != before.ours and after.sentence != before.sentence


def test_the_readme_block_is_rewritten_in_place_and_nothing_else(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# title\n\nabove\n{E.FINDINGS_BEGIN}\nold table\n{FINDINGS_END}\nbelow\n")
    table = E.write_readme_findings(readme)
    assert readme.read_text() == f"# title\n\nabove\n{E.FINDINGS_BEGIN}\n{table}\n{FINDINGS_END}\nbelow\n"
    readme.write_text("# no markers\n")
    with pytest.raises(ValueError, match=re.escape(f"readme={str(readme)!r}")):
        E.write_readme_findings(readme)
    assert readme.read_text() == "# no markers\n"


@pytest.mark.skipif("lrt_memory_sanity" not in SUMMARIES, reason="lrt_memory_sanity has not been reproduced here")
def test_findings_are_read_from_the_root_the_summaries_came_from(tmp_path):
    """A checkpoints folder elsewhere (reproduce --out) is read whole: its results.csv, not the repository's."""
    name = "lrt_memory_sanity"
    (tmp_path / name).mkdir()
    (tmp_path / name / "summary.json").write_text((E.checkpoints_root() / name / "summary.json").read_text())
    results = E.load_results(name).assign(value=0.5)
    results.to_csv(tmp_path / name / "results.csv", index=False)
    here, there = E.findings_table({name: SUMMARIES[name]}), E.findings_table(E.shipped_summaries(tmp_path), tmp_path)
    assert there.loc[0, "ours"].startswith("exact accuracy 0.500") and here.loc[0, "ours"] != there.loc[0, "ours"]


def test_findings_text_prints_each_verdict_over_its_wrapped_sentence():
    text = E.findings_text(SUMMARIES, width=60)
    table = E.findings_table(SUMMARIES)
    blocks = text.split("\n" + table.loc[1, "recipe"] + ": ")[0].splitlines()
    assert blocks[0] == f"{table.loc[0, 'recipe']}: {table.loc[0, 'verdict']}"
    assert all(line.startswith("  ") and len(line) <= 60 for line in blocks[1:])
    assert " ".join(line.strip() for line in blocks[1:]) == table.loc[0, "finding"]


def test_an_extension_gets_its_own_row_under_its_recipe_and_never_its_verdict():
    """A rule applied beyond the paper's claim is reported beside the verdict, labelled as an extension."""
    name = "lrt_memory_sanity" if "lrt_memory_sanity" in SUMMARIES else next(iter(SUMMARIES))
    summary = copy.deepcopy(SUMMARIES[name])
    summary["extensions"] = [{"name": "a third task", "verdict": "the claim does not extend to a third task",
                              "number": "layer-0 accuracy 0.700 (fails)"}]
    table = E.findings_table({name: summary})
    assert list(table["kind"]) == [summary.get("kind", E.RECIPES[name].kind), "extension"]
    claim, extension = table.iloc[0], table.iloc[1]
    assert claim["verdict"] == core.short_verdict(summary["verdict"])
    assert extension["recipe"] == name and extension["paper"] == "beyond the claim: a third task"
    assert extension["verdict"] == "the claim does not extend to a third task"
    assert extension["ours"] == "layer-0 accuracy 0.700 (fails)" and "a third task" in extension["finding"]
    assert "a third task" not in E.findings_markdown({name: summary})  # the README's glance: the claim's line only
    assert E.findings_markdown({name: summary}).count("\n") == 0

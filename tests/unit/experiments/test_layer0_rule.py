"""layer0_probes' rule (a) tests the claim as the paper states it: on the paper's two tasks, with every other
task or arm an extension row of its own, and no verdict that a different plausible L2 strength would flip."""

from __future__ import annotations

import pandas as pd
import pytest

from workbench.experiments.recipes import layer0_probes as recipe


def _rows(specimens: dict[tuple[str, str, int], tuple[float, float]], standard: float = 0.5) -> pd.DataFrame:
    """Trained layer-0 rows: per (arm, task, scratch) its suffix1 (accuracy, interval top), standard at ``standard``."""
    rows = []
    for (arm, task, scratch), (accuracy, high) in specimens.items():
        base = {"run": f"{task}_{arm}", "arm": arm, "seed": 0, "task": task, "scratch_updates": scratch,
                "majority": 0.5, "C": 0.1, "model": "trained", "layer": 0}
        rows.append({**base, "condition": "suffix1", "accuracy": accuracy, "accuracy_low": accuracy - 0.01,
                     "accuracy_high": high})
        rows.append({**base, "condition": "standard", "accuracy": standard, "accuracy_low": standard - 0.01,
                     "accuracy_high": standard + 0.01})
    return pd.DataFrame(rows)


def _path(rows: pd.DataFrame, along: dict[tuple[str, int], list[tuple[float, float, float, bool]]] | None = None):
    """A path per specimen: (C, accuracy, interval top, plausible); by default flat at the chosen accuracy."""
    out = []
    for r in rows[rows["condition"] == "suffix1"].itertuples():
        points = (along or {}).get((r.run, r.scratch_updates), [(c, r.accuracy, r.accuracy_high, True)
                                                                 for c in recipe.PROBE_CS])
        out += [{"run": r.run, "scratch_updates": r.scratch_updates, "model": "trained", "C": c, "accuracy": a,
                 "accuracy_high": h, "plausible": p} for c, a, h, p in points]
    return pd.DataFrame(out)


PAPER = {("fbt", "completion_tracking", 0): (0.98, 0.99), ("fbt", "delayed_memory", 8): (1.0, 1.0)}


def test_the_claim_reads_the_papers_two_tasks_and_a_third_task_is_an_extension():
    rows = _rows({**PAPER, ("fbt", "multi_register", 32): (0.77, 0.788)})
    claim, extensions, outcomes = recipe.verdicts(rows, _path(rows))
    assert claim == "reproduces"  # multi_register's miss is not the paper's claim
    by_name = {e.name: e for e in extensions}
    assert by_name["multi_register (FBT)"].verdict == "the claim does not extend to multi_register (FBT)"
    assert "0.770 (fails)" in by_name["multi_register (FBT)"].number
    assert by_name["LRT"].verdict == "not tested for LRT: no gated specimen"
    assert set(outcomes["outcome"]) == {"lifts", "fails"}


def test_a_paper_task_that_fails_does_not_reproduce_and_one_between_is_inconclusive():
    failing = _rows({**PAPER, ("fbt", "delayed_memory", 32): (0.7, 0.75)})
    assert recipe.verdicts(failing, _path(failing))[0] == "does not reproduce"
    between = _rows({**PAPER, ("fbt", "delayed_memory", 32): (0.9, 0.92)})
    assert recipe.verdicts(between, _path(between))[0] == "inconclusive"
    loud = _rows(PAPER, standard=0.7)  # standard prefill already reads the label at layer 0
    assert recipe.verdicts(loud, _path(loud))[0] == "inconclusive"


def test_a_verdict_that_flips_within_the_plausible_strengths_is_inconclusive():
    rows = _rows(PAPER)
    weak = [(0.01, 0.93, 0.94, True), (0.1, 0.98, 0.99, True), (1.0, 0.98, 0.99, True), (10.0, 0.99, 1.0, True)]
    claim = recipe.verdicts(rows, _path(rows, {("completion_tracking_fbt", 0): weak}))[0]
    assert claim.startswith("inconclusive: the verdict flips with the probe's L2 strength")
    assert "between at C=0.01" in claim
    # the same strength told apart from the best by cross-validation cannot flip it
    told_apart = [(c, a, h, c != 0.01) for c, a, h, _ in weak]
    assert recipe.verdicts(rows, _path(rows, {("completion_tracking_fbt", 0): told_apart}))[0] == "reproduces"


def test_no_gated_specimen_is_not_tested():
    empty = _rows({})
    claim, extensions, _ = recipe.verdicts(empty, pd.DataFrame(columns=["run", "scratch_updates", "model", "C",
                                                                        "accuracy", "accuracy_high", "plausible"]))
    assert claim == "not tested: no gated specimen"
    assert all(e.verdict.startswith("not tested for") for e in extensions)


@pytest.mark.parametrize("verdict,said", [("reproduces", "the claim extends to X"),
                                          ("does not reproduce", "the claim does not extend to X"),
                                          ("inconclusive", "inconclusive for X")])
def test_extensions_are_worded_as_extensions(verdict, said):
    assert recipe.extension_verdict("X", verdict) == said

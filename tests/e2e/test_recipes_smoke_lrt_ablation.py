"""The four LRT ablations on language at smoke scale, in one checkpoint root: each writes its results, a verdict and
every gate it stated, its runs are up to date afterwards, RESULTS.md shows it, and the baseline and reference LRT
runs are trained once (by the first recipe) and copied into the others, as ``lrt_vs_baseline``'s are at full scale.
``test_recipes_smoke`` leaves these four to this file (``ABLATIONS``), which pytest-xdist's ``--dist loadfile``
gives a worker of its own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from workbench import experiments as E
from workbench.checkpoint import load_metrics
from workbench.experiments.recipes import gate_control, injection_ablation, memory_source, source_layer
from workbench.experiments.runs import reusable

ORDER = (source_layer, memory_source, injection_ablation, gate_control)  # the first trains the shared runs
ABLATIONS = tuple(m.RECIPE.name for m in ORDER)
SHARED = ("text_baseline_s", "text_lrt_interleaved_s")


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("lrt_ablation")
    for module in ORDER:
        E.reproduce(module.RECIPE.name, root=root / "ck", scale=E.smoke_scale(), scratch=root / "runs")
    E.write_results_md(root / "ck", root / "RESULTS.md")
    return root


@pytest.mark.slow
@pytest.mark.parametrize("module", ORDER, ids=[m.RECIPE.name for m in ORDER])
def test_ablation_smoke(root, module):
    recipe = module.RECIPE
    out = root / "ck" / recipe.name
    assert (out / "results.csv").is_file() and (out / "results.png").stat().st_size > 1000
    summary = json.loads((out / "summary.json").read_text())
    assert summary["kind"] == "paper" and summary["verdict"] and summary["number"]
    assert [g["name"] for g in summary["gates"]] == [g.name for g in recipe.gates]
    assert all({"value", "passed", "op", "threshold"} <= set(g) for g in summary["gates"])
    specs = recipe.build(E.smoke_scale())
    assert summary["runs"] == sorted(s.name for s in specs)
    assert set(summary["comparisons"]) == set(module.COMPARISONS)
    stale = [s.name for s in specs if not reusable(out / s.name, s)]
    assert not stale, stale
    text = (root / "RESULTS.md").read_text()
    assert f"## {recipe.name}" in text and summary["verdict"] in text
    said = recipe.finding(summary, pd.read_csv(out / "results.csv"))
    assert said.sentence.endswith(".") and "nan" not in said.sentence


@pytest.mark.slow
def test_the_shared_runs_are_trained_once(root):
    first = ORDER[0].RECIPE.name
    for module in ORDER[1:]:
        for spec in module.RECIPE.build(E.smoke_scale()):
            if spec.name.startswith(SHARED):
                path = root / "ck" / module.RECIPE.name / spec.name
                assert load_metrics(path)["recipe"] == first, spec.name
                assert (path / "model.safetensors").read_bytes() == \
                    (root / "ck" / first / spec.name / "model.safetensors").read_bytes()

"""Experiments: every shipped checkpoint reproduces its recorded metric; every recipe runs (smoke scale)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from workbench import experiments as E
from workbench.checkpoint import load_checkpoint, load_metrics
from workbench.evaluation import paired_difference, summarize, verdict
from workbench.train import TrainConfig

SHIPPED = sorted(p.parent for p in (Path(__file__).resolve().parents[1] / "checkpoints").glob("*/*/metrics.json"))


@pytest.mark.parametrize("path", SHIPPED, ids=[f"{p.parent.name}/{p.name}" for p in SHIPPED])
def test_shipped_checkpoint_reproduces_its_recorded_metric(path):
    """A code change that silently alters a model (or its evaluation) fails here."""
    metrics = load_metrics(path)
    spec = E.RunSpec(metrics["run"], TrainConfig.from_dict(metrics["train_config"]), metrics["eval_schedule"],
                     metrics["eval_size"])
    recomputed = summarize(E.evaluate_run(load_checkpoint(path), spec))
    for key in ("loss", "accuracy"):
        assert recomputed[key] == pytest.approx(metrics["eval"][key], rel=1e-4, abs=1e-5), key


def test_every_recipe_has_a_claim_and_runs():
    table = E.list_recipes()
    assert set(table["recipe"]) == set(E.RECIPES) and (table["runs"] > 0).all()
    assert all(r.claim and r.setting for r in E.RECIPES.values())


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(E.RECIPES))
def test_recipe_smoke(tmp_path, name):
    outcome = E.reproduce(name, root=tmp_path / "ck", scale=E.smoke_scale(), scratch=tmp_path / "runs")
    out = tmp_path / "ck" / name
    assert (out / "results.csv").is_file() and (out / "results.png").stat().st_size > 1000
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verdict"] == outcome.verdict and summary["number"] == outcome.number
    for run in summary["runs"]:
        assert (out / run / "model.safetensors").is_file() and (out / run / "history.csv").is_file()
        assert load_metrics(out / run)["recipe"] == name
    # up to date: a second call trains nothing and reaches the same numbers
    again = E.reproduce(name, root=tmp_path / "ck", scale=E.smoke_scale(), scratch=tmp_path / "runs")
    assert again.number == outcome.number
    text = E.write_results_md(tmp_path / "ck", tmp_path / "RESULTS.md")
    assert name in text and outcome.verdict in text


def test_matched_steps_follow_the_flop_accounting():
    cfg = E._config("running_sum", E.LRT_MODEL, 1, 0, E.RUNNING_SUM)
    single = E.matched_steps(cfg, 1e12)
    assert E.matched_steps(cfg.replace(schedule="interleaved"), 1e12) == single // 2
    assert E.matched_steps(cfg.replace(schedule="multipass", passes=3), 1e12) == single // 3


def test_paired_difference_and_verdict():
    rng = np.random.default_rng(0)
    a = rng.normal(size=500)
    better = paired_difference(a, a + 0.5)
    assert better["low"] > 0.4 and verdict(better, 1) == "reproduces" and verdict(better, -1) == "does not reproduce"
    same = paired_difference(a, a + rng.normal(scale=0.01, size=500))
    assert verdict(same, 1) == "inconclusive"
    with pytest.raises(ValueError, match="expected_sign"):
        verdict(same, 0)


def test_unknown_recipe_and_missing_results_are_clear(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="unknown"):
        E.reproduce("nope", root=tmp_path)
    monkeypatch.setenv(E.ROOT_ENV, str(tmp_path))
    with pytest.raises(FileNotFoundError, match="reproduce lrt_vs_baseline"):
        E.ensure("lrt_vs_baseline")

"""Every shipped checkpoint still computes the metric it recorded, in float64."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench import experiments as E
from workbench.checkpoint import load_checkpoint, load_metrics
from workbench.experiments.runs import reusable, spec_of


def _one_per_configuration(runs: list[Path]) -> list[Path]:
    """One run per distinct (model configuration, evaluation): what this check guards is the code, a model's forward
    and its recorded evaluation, which every run of one configuration exercises the same way; the weights
    themselves are guarded by each manifest's sha256, checked on every load."""
    seen: dict[str, Path] = {}
    for run in runs:
        metrics = json.loads((run / "metrics.json").read_text())
        train = metrics["train_config"]
        key = json.dumps([json.loads((run / "config.json").read_text())["model"], metrics["eval_schedule"],
                          metrics["eval_size"], train["task"], train.get("task_params"),
                          metrics.get("eval_task_params")], sort_keys=True)
        seen.setdefault(key, run)
    return sorted(seen.values())


SHIPPED = _one_per_configuration(sorted(p.parent for p in (Path(__file__).resolve().parents[2] / "checkpoints").glob(
    "*/*/metrics.json")))


@pytest.mark.parametrize("path", SHIPPED, ids=[f"{p.parent.name}/{p.name}" for p in SHIPPED])
def test_shipped_checkpoint_reproduces_its_recorded_metric(path):
    """A code change that silently alters a model (or its evaluation) fails here, on any CPU.

    The float64 evaluation is compared, not the float32 one: under the exact recurrence far past its
    training depth a model amplifies float32 rounding (which differs between CPUs and thread counts)
    into percent-level loss changes; a 1e-13 relative weight perturbation moves the float64 loss of the
    worst shipped specimen by ~3e-7 relative, so 1e-6 leaves a margin over float64 rounding (~1e-16).
    """
    metrics = load_metrics(path)
    assert "eval_float64" in metrics, "the float64 evaluation every saved run records"
    recomputed = E.reference_metrics(load_checkpoint(path), spec_of(path))
    for key in ("loss", "accuracy"):
        assert recomputed[key] == pytest.approx(metrics["eval_float64"][key], rel=1e-6, abs=1e-9), key


def test_every_shipped_checkpoint_carries_its_manifest():
    """Every shipped checkpoint is format 2 with its manifest: none depends on the unverified path."""
    configs = sorted(E.checkpoints_root().rglob("config.json"))
    bare = [str(c.parent) for c in configs if not (c.parent / "manifest.json").is_file()
            or json.loads(c.read_text()).get("format") != 2]
    assert configs and not bare, bare


def test_every_shipped_checkpoint_names_the_task_it_learned():
    """A shipped run's config.json says its task and parameters (what its metrics' training config trained on), so
    ``info``, ``probe`` and ``eval`` read it from the checkpoint alone."""
    wrong = []
    for config in sorted(E.checkpoints_root().rglob("config.json")):
        header, trained = json.loads(config.read_text()), load_metrics(config.parent)["train_config"]
        if (header.get("task"), header.get("task_params")) != (trained["task"], trained["task_params"]):
            wrong.append(str(config.parent))
    assert not wrong, wrong


@pytest.mark.parametrize("name", sorted(E.RECIPES))
def test_every_shipped_summary_states_its_recipes_current_claim_setting_and_rule(name):
    """RESULTS.md, the docs and the notebooks print a summary's claim, setting and rule: a recipe whose text
    changed (its model, its steps, its arms) must be analysed again, or the pages describe another study."""
    path = E.checkpoints_root() / name / "summary.json"
    if not path.is_file():
        pytest.skip(f"{name} is not shipped")
    stored, recipe = json.loads(path.read_text()), E.RECIPES[name]
    stale = [field for field in ("claim", "setting", "rule") if stored[field] != getattr(recipe, field)]
    assert not stale, f"{name}: {stale} changed since it was analysed; run python -m workbench reproduce {name}"


@pytest.mark.parametrize("name", sorted(E.RECIPES))
def test_every_shipped_run_is_the_one_its_recipe_would_train_now(name):
    """A recipe whose code changed (its steps, its model, its evaluation) makes its shipped runs stale: the next
    ``reproduce`` would retrain them, and the results, RESULTS.md and the notebooks would describe models the
    recipe no longer builds. Every shipped recipe's runs must be reusable as they stand."""
    if not (E.checkpoints_root() / name / "summary.json").is_file():
        pytest.skip(f"{name} is not shipped")
    stale = [s.name for s in E.RECIPES[name].build(1.0) if not reusable(E.checkpoints_root() / name / s.name, s)]
    assert not stale, f"{name}: stale runs {stale}; retrain with python -m workbench reproduce {name}"

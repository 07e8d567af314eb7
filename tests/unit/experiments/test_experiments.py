"""Experiments: gates, rules, intervals, the runner's bookkeeping (the shipped checkpoints' recorded metrics are
re-checked in tests/specimens/test_specimens_metrics.py, every recipe end to end in tests/e2e/test_recipes_smoke.py)."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from workbench import experiments as E
from workbench import schedules as S
from workbench.checkpoint import load_config, load_metrics
from workbench.evaluation import hierarchical_difference, paired_difference
from workbench.experiments import pool
from workbench.stats import MIN_SEEDS, verdict


def test_every_recipe_states_its_test_before_running():
    table = E.list_recipes()
    assert set(table["recipe"]) == set(E.RECIPES) and (table["runs"] > 0).all()
    for r in E.RECIPES.values():
        assert r.claim and r.setting and r.rule and r.chance, r.name
        assert r.gates or r.kind != "paper", r.name
        for field in ("claim", "setting", "rule", "chance", "caveat", "paper"):  # a missing f prefix shows its braces
            assert not re.search(r"\{[A-Za-z_][^}]*\}", getattr(r, field)), (r.name, field, getattr(r, field))


def _tiny_recipe(threshold: float, drawn: list | None = None) -> E.Recipe:
    """A recipe of one 2-step run whose single gate is its answer accuracy; ``drawn`` collects what its figure
    was titled by."""

    def build(scale: float) -> list[E.RunSpec]:
        return [E.RunSpec("run_s0", E.config("running_sum", E.SMALL_MODEL, 2, 0, {"p": 5, "length": 8}),
                          eval_size=16)]

    def analyze(ctx: E.Context) -> E.Outcome:
        import matplotlib.pyplot as plt

        def draw(verdict: str):
            (drawn if drawn is not None else []).append(verdict)
            return plt.figure()

        acc = float(ctx.per_example["run_s0"]["accuracy"].mean())
        return E.Outcome(pd.DataFrame({"arm": ["run"], "value": [acc]}), draw, f"accuracy {acc:.3f}",
                         "reproduces", {"learned": acc})

    return E.Recipe("tiny", "a claim", "a setting", build, analyze,
                    gates=(E.Gate("learned", "held-out accuracy", ">=", threshold),), rule="a rule", chance="0")


@pytest.mark.parametrize("threshold, expected", [(2.0, "not tested: learned = "), (-1.0, "reproduces")])
def test_a_failed_gate_replaces_the_verdict(tmp_path, monkeypatch, threshold, expected):
    monkeypatch.setenv(E.ROOT_ENV, str(tmp_path / "ck"))
    drawn = []
    monkeypatch.setitem(E.RECIPES, "tiny", _tiny_recipe(threshold, drawn))
    outcome = E.reproduce("tiny")  # no root given: the checkpoint root, as load_run reads it
    assert outcome.verdict.startswith(expected) and drawn == [outcome.verdict]  # the figure states the gated one
    if threshold > 1:
        assert outcome.verdict.endswith("(needs >= 2)")
    summary = json.loads((tmp_path / "ck" / "tiny" / "summary.json").read_text())
    assert summary["verdict"] == outcome.verdict and summary["gates"][0]["passed"] == (threshold < 0)
    assert E.load_run("tiny", "run_s0") is not None and (tmp_path / "runs" / "tiny").is_dir()
    text = E.write_results_md()
    assert (tmp_path / "RESULTS.md").read_text() == text
    assert "| learned |" in text and ("**fail**" in text) == (threshold > 1) and outcome.verdict in text


def test_parallel_jobs_train_the_same_runs(tmp_path, monkeypatch):
    """reproduce(jobs=2) trains the stale runs in worker processes; the result is the serial one."""
    def build(scale: float) -> list[E.RunSpec]:
        return [E.RunSpec(f"run_s{seed}", E.config("running_sum", E.SMALL_MODEL, 3, seed, {"p": 5, "length": 8}),
                          eval_size=16) for seed in (0, 1)]

    def analyze(ctx: E.Context) -> E.Outcome:
        import matplotlib.pyplot as plt

        losses = [float(ctx.per_example[n]["nats"].mean()) for n in sorted(ctx.per_example)]
        return E.Outcome(pd.DataFrame({"loss": losses}), lambda _: plt.figure(), " ".join(f"{x:.6f}" for x in losses),
                         "reproduces", {"runs": len(losses)})

    recipe = E.Recipe("pair", "a claim", "a setting", build, analyze, gates=(E.Gate("runs", "runs", ">=", 2),),
                      rule="a rule", chance="0")
    monkeypatch.setitem(E.RECIPES, "pair", recipe)
    torch.set_num_threads(1)
    serial = E.reproduce("pair", root=tmp_path / "a", scratch=tmp_path / "ra")
    parallel = E.reproduce("pair", root=tmp_path / "b", scratch=tmp_path / "rb", jobs=2)
    assert parallel.verdict == serial.verdict == "reproduces"
    assert np.allclose([float(x) for x in parallel.number.split()], [float(x) for x in serial.number.split()],
                       rtol=1e-5)
    summary = json.loads((tmp_path / "b" / "pair" / "summary.json").read_text())
    assert summary["jobs"] == 2 and summary["train_wall_minutes"] > 0
    assert summary["trained_runs"] == ["run_s0", "run_s1"] and 0 < summary["quiet_wall_minutes"]
    cpu = [load_metrics(tmp_path / "b" / "pair" / n)["train"]["cpu_seconds"] for n in summary["trained_runs"]]
    assert summary["quiet_wall_minutes"] == pytest.approx(max(cpu) / 60)  # two runs, two workers
    header = load_config(tmp_path / "b" / "pair" / "run_s1")[1]  # the checkpoint alone says what it learned
    assert (header["task"], header["task_params"], header["run"]) == ("running_sum", {"p": 5, "length": 8}, "run_s1")
    E.reproduce("pair", root=tmp_path / "b", scratch=tmp_path / "rb")  # nothing stale: analysis only
    again = json.loads((tmp_path / "b" / "pair" / "summary.json").read_text())
    assert {k: again[k] for k in ("jobs", "train_wall_minutes", "trained_runs")} == \
        {k: summary[k] for k in ("jobs", "train_wall_minutes", "trained_runs")}  # the training's wall clock, kept
    # an invocation that trains and is stopped during its analysis: the rerun that analyses reports its clocks
    shutil.rmtree(tmp_path / "b" / "pair" / "run_s1")  # run_s1 no longer saved: trained again

    def stopped(ctx: E.Context) -> E.Outcome:
        raise KeyboardInterrupt

    monkeypatch.setitem(E.RECIPES, "pair", dataclasses.replace(recipe, analyze=stopped))
    with pytest.raises(KeyboardInterrupt):
        E.reproduce("pair", root=tmp_path / "b", scratch=tmp_path / "rb")
    monkeypatch.setitem(E.RECIPES, "pair", recipe)
    E.reproduce("pair", root=tmp_path / "b", scratch=tmp_path / "rb")
    last = json.loads((tmp_path / "b" / "pair" / "summary.json").read_text())
    assert last["trained_runs"] == ["run_s1"] and last["jobs"] == 1 and last["quiet_wall_minutes"] is None
    with pytest.raises(ValueError, match="jobs"):
        E.reproduce("pair", root=tmp_path / "c", jobs=0)


def test_makespan_packs_longest_first():
    assert pool.makespan([3.0, 3.0, 2.0, 2.0, 2.0], 2) == 7.0  # 3+2+2 | 3+2
    assert pool.makespan([5.0, 1.0], 1) == 6.0 and pool.makespan([], 2) == 0.0
    with pytest.raises(ValueError, match="workers"):
        pool.makespan([1.0], 0)


@pytest.mark.subprocess
def test_map_jobs_gives_the_calls_results_in_order_in_workers_as_here():
    """What a worker computes comes back in the order of the calls, as one process computes it; a worker runs at one
    torch thread whatever this process uses."""
    calls = [((3, 4),), ((1, 2, 3),), ((),)]  # math.prod of each: 12, 6, 1
    here = pool.map_jobs(math.prod, calls)
    assert here == [12, 6, 1] and pool.map_jobs(math.prod, calls, jobs=2) == here
    assert pool.map_jobs(torch.get_num_threads, [(), ()], jobs=2) == [1, 1]
    with pytest.raises(ValueError, match="jobs"):
        pool.map_jobs(math.prod, calls, jobs=0)


def test_a_changed_spec_retrains_over_its_outdated_scratch_run(tmp_path, monkeypatch):
    """The scratch run directory of a spec that changed since (more steps) is replaced, not resumed: the
    trainer would refuse a config that differs."""
    def recipe(n_steps: int) -> E.Recipe:
        def build(scale: float) -> list[E.RunSpec]:
            return [E.RunSpec("run_s0", E.config("running_sum", E.SMALL_MODEL, n_steps, 0, {"p": 5, "length": 8}),
                              eval_size=16)]

        tiny = _tiny_recipe(-1.0)
        return E.Recipe("tiny", tiny.claim, tiny.setting, build, tiny.analyze, gates=tiny.gates, rule=tiny.rule,
                        chance=tiny.chance)

    for n_steps in (2, 3):
        monkeypatch.setitem(E.RECIPES, "tiny", recipe(n_steps))
        E.reproduce("tiny", root=tmp_path / "ck", scratch=tmp_path / "runs")
        assert load_metrics(tmp_path / "ck" / "tiny" / "run_s0")["train"]["step"] == n_steps


def test_gate_checks_its_arguments():
    gate = E.Gate("g", "q", "<", 0.0)
    assert gate.check(-1).passed and not gate.check(0).passed and not gate.check(float("nan")).passed
    with pytest.raises(ValueError, match="op"):
        E.Gate("g", "q", "=>", 0.0)
    with pytest.raises(ValueError, match="'x'.*gates"):
        E.Recipe("x", "c", "s", lambda s: [], lambda c: None)
    with pytest.raises(ValueError, match=r"\['learned'\]"):
        E.apply_gates(_tiny_recipe(0.5), {}, "reproduces")


def test_matched_steps_follow_the_flop_accounting():
    cfg = E.config("running_sum", E.LRT_MODEL, 1, 0, E.RUNNING_SUM)
    single = E.matched_steps(cfg, 1e12)
    assert E.matched_steps(cfg.replace(schedule="interleaved"), 1e12) == single // 2
    assert E.matched_steps(cfg.replace(schedule=S.Multipass(3)), 1e12) == single // 3


def test_paired_difference_and_verdict():
    rng = np.random.default_rng(0)
    a = rng.normal(size=500)
    better = paired_difference(a, a + 0.5)
    assert better["low"] > 0.4 and verdict(better, 1) == "reproduces" and verdict(better, -1) == "does not reproduce"
    same = paired_difference(a, a + rng.normal(scale=0.01, size=500))
    assert verdict(same, 1) == "inconclusive"
    with pytest.raises(ValueError, match="expected_sign"):
        verdict(same, 0)


def test_hierarchical_bootstrap_known_answers():
    rng = np.random.default_rng(0)
    # one seed per arm: the paired example bootstrap
    a = rng.normal(size=400)
    one = hierarchical_difference([a], [a + 0.3 + rng.normal(scale=0.1, size=400)])
    assert one["seeds"] == 1 and 0.28 < one["low"] < 0.3 < one["high"] < 0.32
    assert verdict(one, 1).startswith(f"not tested: seeds = 1 (needs >= {MIN_SEEDS})")
    # constant examples: a bootstrap of the seed means; the seed spread (0.2) swamps a 0.05 effect
    ref = [np.full(100, m) for m in (0.0, 0.2, 0.4)]
    arm = [np.full(100, m + 0.05) for m in (0.0, 0.2, 0.4)]
    wide = hierarchical_difference(ref, arm)
    assert wide["mean"] == pytest.approx(0.05) and wide["low"] < 0 < wide["high"] and verdict(wide, 1) == "inconclusive"
    # the example-only interval on the seed-averaged arrays hides that spread
    flat = paired_difference(np.mean(ref, 0), np.mean(arm, 0))
    assert flat["low"] == pytest.approx(0.05) and flat["high"] == pytest.approx(0.05)
    # the spread of seed means is what the interval tracks: it shrinks as seeds agree
    tight = hierarchical_difference([np.full(100, m) for m in (0.0, 0.01, 0.02)],
                                    [np.full(100, m + 0.05) for m in (0.0, 0.01, 0.02)])
    assert tight["low"] > 0 and verdict(tight, 1) == "reproduces"
    with pytest.raises(ValueError, match=r"reference.*\[3\]"):
        hierarchical_difference([np.zeros(3)], [np.zeros(4)])


def test_unknown_recipe_and_missing_results_are_clear(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="unknown"):
        E.reproduce("nope", root=tmp_path)
    monkeypatch.setenv(E.ROOT_ENV, str(tmp_path))
    with pytest.raises(FileNotFoundError, match="reproduce lrt_vs_baseline"):
        E.ensure("lrt_vs_baseline")


def test_one_checkpoint_root(tmp_path, monkeypatch):
    monkeypatch.delenv(E.ROOT_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert E.checkpoints_root() == Path(E.__file__).resolve().parents[2] / "checkpoints"
    monkeypatch.setenv(E.ROOT_ENV, "elsewhere")
    assert E.checkpoints_root() == tmp_path / "elsewhere"


def test_a_run_another_recipe_trained_is_reused_under_this_recipes_evaluation(tmp_path, monkeypatch):
    """The same training under another evaluation schedule: copied, not retrained, and evaluated again under
    this recipe's schedule (its metrics say so); its weights and history are the other recipe's."""
    def recipe(name: str, schedule: S.Schedule) -> E.Recipe:
        def build(scale: float) -> list[E.RunSpec]:
            cfg = E.config("running_sum", E.LRT_MODEL, 2, 0, {"p": 5, "length": 8})
            return [E.RunSpec("run_s0", cfg, schedule, eval_size=16)]

        def analyze(ctx: E.Context) -> E.Outcome:
            import matplotlib.pyplot as plt

            return E.Outcome(pd.DataFrame({"x": [1]}), lambda _: plt.figure(), "n", "exploratory", {})

        return E.Recipe(name, "a claim", "a setting", build, analyze, kind="exploratory", rule="r", chance="0")

    monkeypatch.setitem(E.RECIPES, "first", recipe("first", S.Single()))
    monkeypatch.setitem(E.RECIPES, "second", recipe("second", S.Sequential()))
    E.reproduce("first", root=tmp_path / "ck", scratch=tmp_path / "runs")
    E.reproduce("second", root=tmp_path / "ck", scratch=tmp_path / "runs")
    first, second = (load_metrics(tmp_path / "ck" / n / "run_s0") for n in ("first", "second"))
    assert not (tmp_path / "runs" / "second").exists()  # nothing trained for the second recipe
    assert second["evaluated_by"] == "second" and second["recipe"] == "first"
    assert second["train"] == first["train"] and S.parse(second["eval_schedule"]) == S.Sequential()
    assert second["eval"] != first["eval"]  # an LRT evaluated with and without its memory


def test_a_run_scored_on_another_setting_records_it_and_a_changed_setting_is_not_up_to_date(tmp_path, monkeypatch):
    """``RunSpec.eval_task_params``: a run trained on one setting (here a mix of lengths) is scored on the one its
    recipe asks about; its metrics record the setting, ``spec_of`` reads it back, and a spec scored elsewhere is not
    the same run."""
    from workbench.experiments.runs import spec_of
    from workbench.experiments.store import up_to_date

    trained, scored = {"p": 5, "length": 8}, {"p": 5, "length": 12}

    def recipe(eval_task_params: dict | None) -> E.Recipe:
        def build(scale: float) -> list[E.RunSpec]:
            cfg = E.config("running_sum", E.SMALL_MODEL, 2, 0, trained)
            return [E.RunSpec("run_s0", cfg, eval_size=16, eval_task_params=eval_task_params)]

        tiny = _tiny_recipe(-1.0)
        return E.Recipe("tiny", tiny.claim, tiny.setting, build, tiny.analyze, gates=tiny.gates, rule=tiny.rule,
                        chance=tiny.chance)

    monkeypatch.setitem(E.RECIPES, "tiny", recipe(scored))
    spec = E.RECIPES["tiny"].build(1.0)[0]
    assert spec.eval_batch().tokens.size(1) > E.RunSpec("x", spec.train).eval_batch().tokens.size(1)
    E.reproduce("tiny", root=tmp_path / "ck", scratch=tmp_path / "runs")
    path = tmp_path / "ck" / "tiny" / "run_s0"
    assert load_metrics(path)["eval_task_params"] == scored and spec_of(path).eval_task_params == scored
    assert up_to_date(path, spec) and not up_to_date(path, E.RunSpec("run_s0", spec.train, eval_size=16))

"""The trainer: config validation, optimisers and LR schedules, compute accounting and the FLOP
budget, evaluation, the NaN guard, exact resume (in process), gradient accumulation, the CLI."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import itertools
import math
import time
import types

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

import workbench as wb
from workbench.checkpoint import load_checkpoint, read_safetensors, save_checkpoint
from workbench.cli import add_arguments, config_from_args
from workbench.experiments import matched_steps
from workbench.experiments.common import step_flops
from workbench.files import read_json
from workbench.optim import build_optimizers, load_optimizer_state, lr_factor, optimizer_state
from workbench.run_dir import CONFIG_FILE, HISTORY_FILE, history_columns
from workbench.schedules import ScheduleOutput
from workbench.train import NonFiniteLossError, _Processes, _Run, train
from workbench.train_config import TrainConfig

TINY_MODEL = dict(n_layer=2, n_head=2, n_embd=32)
TINY_TASK = dict(p=5, length=16)


def tiny(**overrides) -> TrainConfig:
    """A run that takes a fraction of a second."""
    base = dict(task="running_sum", task_params=dict(TINY_TASK), model=dict(TINY_MODEL), steps=12,
                batch_size=8, eval_size=16, log_every=1, progress=False)
    base.update(overrides)
    return TrainConfig(**base)


FBT_RECIPE = dict(model=dict(TINY_MODEL, mechanism="fbt"), schedule=wb.schedules.PassMix.of({1: 0.5, 2: 0.3, 3: 0.2}),
                  feedback_start=0.25, prefix_mixin=0.5)


# ------------------------------------------------------------------------------------------ config
@pytest.mark.parametrize("field, value", [
    ("steps", 0), ("batch_size", -1), ("grad_accum", 3), ("schedule", "jacobi"),
    ("schedule", {"schedule": "multipass", "passes": 0}), ("schedule", wb.schedules.regime("soft", 1, 4)),
    ("optimizer", "sgd"), ("lr", 0.0), ("matrix_lr", float("nan")), ("lr_schedule", "linear"),
    ("warmup_steps", 13), ("decay_frac", 1.5), ("grad_clip", -1.0), ("feedback_start", 1.0),
    ("prefix_mixin", 2.0), ("budget_flops", 0.0), ("device", "tpu"), ("log_every", 0), ("seed", -1),
    ("schedule", {"schedule": "multipass", "pass_mix": {1: 0.5, 2: 0.4}}),
    ("schedule", {"schedule": "multipass", "pass_mix": {0: 1.0}}), ("resume", True),
    ("model", {"n_layr": 2}), ("model", {"vocab_size": 10}), ("model", {"n_embd": 30}), ("task", ""),
    ("compile", "yes"), ("prefix_draw", "document"),
])
def test_bad_values_name_their_field(field, value):
    with pytest.raises(ValueError, match=field if field != "model" else "model|n_embd"):
        tiny(**{field: value})


def test_a_schedule_key_the_schedule_lacks_is_refused_by_name():
    with pytest.raises(ValueError, match="pass_mix"):
        tiny(schedule={"schedule": "interleaved", "pass_mix": {1: 1.0}})
    with pytest.raises(ValueError, match="passes"):
        tiny(schedule={"schedule": "blockwise", "passes": 3})


def test_the_schedule_is_stored_as_its_value_with_every_setting():
    """A fixed point's own tolerance and a pass mix's objective weight survive the JSON round trip."""
    for value in (wb.schedules.FixedPoint(12, aux_weight=2.0, tol=1e-5),
                  wb.schedules.PassMix.of({1: 0.75, 2: 0.22, 3: 0.03}, aux_weight=3.0, passes=2),
                  wb.schedules.Multipass(3, aux_weight=0.5), wb.schedules.Blockwise(4)):
        cfg = tiny(schedule=value)
        assert cfg.schedule == value and TrainConfig.from_json(cfg.to_json()).schedule == value
    assert tiny(schedule="interleaved").schedule == wb.schedules.Interleaved()
    assert tiny(schedule={"schedule": "multipass", "passes": 3}).schedule == wb.schedules.Multipass(3)


def test_json_round_trip_is_exact_and_fbt_ties_embeddings():
    user_model = dict(TINY_MODEL, mechanism="fbt")
    cfg = tiny(**{**FBT_RECIPE, "model": user_model}, budget_flops=1e9, out_dir="runs/x")
    assert cfg.model["tie_embeddings"] is True and "tie_embeddings" not in user_model
    back = TrainConfig.from_json(cfg.to_json())
    assert back == cfg and dict(back.schedule.mix) == {1: 0.5, 2: 0.3, 3: 0.2}
    lrt = tiny(model=dict(TINY_MODEL, mechanism="lrt", lrt_inject=["kv"]))
    assert TrainConfig.from_json(lrt.to_json()) == lrt and lrt.model["lrt_inject"] == ("kv",)
    with pytest.raises(ValueError, match="tie_embeddings"):
        tiny(model=dict(TINY_MODEL, mechanism="fbt", tie_embeddings=False))


# ------------------------------------------------------------------------------------------ optimisers
def test_lr_schedules():
    wsd = tiny(steps=100, warmup_steps=10, lr_schedule="wsd", decay_frac=0.2, min_lr_frac=0.1)
    f = [lr_factor(wsd, s) for s in range(100)]
    assert f[0] == pytest.approx(0.1) and f[9] == 1.0  # linear warmup to the peak
    assert all(x == 1.0 for x in f[10:80])  # stable
    assert all(a > b for a, b in zip(f[80:], f[81:])) and 0.1 < f[-1] < 0.15  # linear decay toward the floor
    cos = tiny(steps=100, lr_schedule="cosine", min_lr_frac=0.0)
    c = [lr_factor(cos, s) for s in range(100)]
    assert c[0] == 1.0 and c[50] == pytest.approx(0.5) and all(a > b for a, b in zip(c, c[1:]))
    assert {lr_factor(tiny(lr_schedule="constant"), s) for s in range(12)} == {1.0}


def test_muon_takes_the_hidden_matrices_and_adamw_the_rest():
    cfg = tiny(model=dict(TINY_MODEL, mechanism="lrt"))
    model = wb.build_model(cfg.model_config(vocab_size=20, seq_len=16))
    groups = model.parameter_groups()
    opts = build_optimizers(model, cfg)
    muon = {id(p) for g in opts["muon"].param_groups for p in g["params"]}
    adam = {id(p) for g in opts["adamw"].param_groups for p in g["params"]}
    assert muon == {id(p) for p in groups["matrices"]}
    assert adam == {id(p) for p in groups["embedding"] + groups["readout"] + groups["scalars"]}
    assert groups["scalars"] and all(p.ndim == 2 for p in groups["matrices"])
    only = build_optimizers(model, cfg.replace(optimizer="adamw"))
    assert list(only) == ["adamw"] and sum(len(g["params"]) for g in only["adamw"].param_groups) == len(
        list(model.parameters()))


def test_optimizer_state_survives_safetensors_and_json(tmp_path):
    cfg = tiny(model=dict(TINY_MODEL, mechanism="lrt"))
    model = wb.build_model(cfg.model_config(vocab_size=20, seq_len=16))
    opts = build_optimizers(model, cfg)
    for _ in range(2):
        model(torch.randint(0, 20, (2, 16))).square().mean().backward()
        for o in opts.values():
            o.step()
            o.zero_grad()
    tensors, meta = optimizer_state(opts)
    save_checkpoint(model, tmp_path / "c", extra_files={"o.safetensors": tensors, "o.json": meta})
    fresh = build_optimizers(model, cfg)
    load_optimizer_state(fresh, read_safetensors(tmp_path / "c" / "o.safetensors"),
                         read_json(tmp_path / "c" / "o.json"))
    for name, opt in opts.items():
        a, b = opt.state_dict()["state"], fresh[name].state_dict()["state"]
        assert a.keys() == b.keys() and a
        for pid in a:
            assert a[pid].keys() == b[pid].keys()
            assert all(torch.equal(a[pid][k], b[pid][k]) for k in a[pid])


# ------------------------------------------------------------------------------------------ a run
def test_run_dir_checkpoint_history_and_callback(tmp_path):
    rows = []
    cfg = tiny(out_dir=str(tmp_path / "run"), steps=30, log_every=5, eval_every=10, checkpoint_every=10)
    result = train(cfg, callback=rows.append)
    h = result.history
    assert list(h.columns) == history_columns(cfg) and list(h["step"]) == [5, 10, 15, 20, 25, 30]
    assert [r["step"] for r in rows] == list(h["step"])
    assert h["val_loss"].notna().tolist() == [False, True, False, True, False, True]
    assert h["loss"].iloc[-1] < h["loss"].iloc[0] and h["tokens"].iloc[-1] == 30 * 8 * 16
    on_disk = pd.read_csv(tmp_path / "run" / HISTORY_FILE)
    pd.testing.assert_frame_equal(on_disk, h, check_dtype=False)
    assert not (tmp_path / "run" / "loss.png").exists()  # the trainer draws nothing: LossFigure does (below)
    assert TrainConfig.from_json((tmp_path / "run" / CONFIG_FILE).read_text()) == cfg
    assert not result.model.training
    loaded = load_checkpoint(result.checkpoint_dir)
    for k, v in result.model.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v)
    metrics = read_json(result.checkpoint_dir / "metrics.json")
    assert metrics["step"] == 30 and metrics["val_loss"] == result.metrics["val_loss"]
    assert metrics["stop_reason"] == result.metrics["stop_reason"] == "steps"
    with pytest.raises(ValueError, match="resume"):  # an existing run is never overwritten silently
        train(cfg)


def test_eval_metrics_match_a_direct_computation():
    cfg = tiny(steps=3, eval_size=24)
    result = train(cfg)
    task = wb.tasks.get(cfg.task, **cfg.task_params)
    batch = task.sample(24, seed=cfg.eval_seed, split="val")
    with torch.no_grad():
        logits = result.model(batch.tokens)
    valid = batch.targets >= 0
    loss = F.cross_entropy(logits[valid], batch.targets[valid]).item()
    accuracy = (logits.argmax(-1)[valid] == batch.targets[valid]).float().mean().item()
    m = result.metrics
    assert m["val_loss"] == pytest.approx(loss, rel=1e-5)
    assert m["val_bpb"] == pytest.approx(loss / math.log(2), rel=1e-5)  # one byte per token
    assert m["val_accuracy"] == pytest.approx(accuracy)


def test_flops_count_the_passes_and_the_budget_stops_before_exceeding():
    cfg = tiny(**FBT_RECIPE, steps=40, budget_flops=None)
    full = train(cfg).history
    model = wb.build_model(cfg.model_config(vocab_size=wb.tasks.get(cfg.task, **cfg.task_params).vocab_size,
                                            seq_len=16))
    per_pass = model.flops_per_token(16) * cfg.batch_size * 16
    steps_flops = np.diff(full["flops"], prepend=0.0)
    np.testing.assert_allclose(steps_flops, full["passes"] * per_pass)
    assert (full["passes"].iloc[:10] == 1).all() and set(full["passes"].iloc[10:]) == {1, 2, 3}
    budget = float(full["flops"].iloc[16] + per_pass)  # enough for step 17, and more only if it is 1-pass
    with pytest.warns(UserWarning, match="budget_flops"):  # the cap cuts the learning-rate schedule short
        capped = train(cfg.replace(budget_flops=budget))
    n = len(capped.history)
    assert capped.metrics["stop_reason"] == "budget" and n < cfg.steps
    assert capped.history["flops"].iloc[-1] <= budget < capped.history["flops"].iloc[-1] + steps_flops[n]
    pd.testing.assert_series_equal(capped.history["loss"], full["loss"].iloc[:n])
    with pytest.raises(ValueError, match="budget_flops"):
        train(cfg.replace(budget_flops=per_pass / 2))


def test_a_batch_of_one_length_is_padded_to_its_own_length_and_counted_so():
    """A probe task drawing its scratch length per batch: each step computes (and counts tokens and
    FLOPs for) its own length, not the longest choice; resuming draws the same batches."""
    params = {"scratch_updates": [0, 8], "scratch_draw": "batch"}
    cfg = tiny(task="delayed_memory", task_params=params, steps=12, log_every=1)
    run = _Run(cfg, _Processes(torch.device("cpu")))
    task = wb.tasks.get("delayed_memory", **params)
    lengths = {wb.tasks.get("delayed_memory", scratch_updates=s).seq_len for s in (0, 8)}
    plans = [run.plan(s) for s in range(12)]
    assert {p.seq_len for p in plans} == lengths and task.seq_len == max(lengths)
    for step, plan in enumerate(plans):
        tokens, targets, prefix, _ = next(run.micro_batches(step, plan))
        assert tokens.shape[1] == plan.seq_len == int(run.batch(step).lengths.max())
        assert plan.flops == pytest.approx(run.model.flops_per_token(plan.seq_len) * cfg.batch_size * plan.seq_len)
    history = train(cfg).history
    assert np.diff(history["tokens"], prepend=0).tolist() == [cfg.batch_size * p.seq_len for p in plans]
    assert np.isfinite(history["loss"]).all()


def test_pass_mix_draws_are_deterministic_and_follow_the_mix():
    cfg = tiny(**{**FBT_RECIPE, "feedback_start": 0.0}, steps=400)
    run = _Run(cfg, _Processes(torch.device("cpu")))
    passes = [run.plan(s).passes for s in range(400)]
    assert passes == [run.plan(s).passes for s in range(400)]
    freq = {k: passes.count(k) / 400 for k in (1, 2, 3)}
    assert freq == pytest.approx({1: 0.5, 2: 0.3, 3: 0.2}, abs=0.08)
    prefix = run.plain_prefix(5, run.plan(5))
    assert prefix.shape == (8,) and 0 < (prefix > 0).sum() < 8 and prefix.max() < 16


def test_a_prefix_drawn_per_pass_gives_each_pass_that_reads_memory_its_own():
    """prefix_draw="pass": a (passes - 1, B) draw per step, deterministic, every sequence prefixed when the
    mix-in is 1; the shared draw ("sequence", the default) keeps its (B,) draws, so stored runs replay."""
    cfg = tiny(**{**FBT_RECIPE, "feedback_start": 0.0, "prefix_mixin": 1.0, "prefix_draw": "pass"}, steps=40)
    run = _Run(cfg, _Processes(torch.device("cpu")))
    step = next(s for s in range(40) if run.plan(s).passes == 3)
    prefix = run.plain_prefix(step, run.plan(step))
    assert prefix.shape == (2, 8) and (prefix > 0).all() and not torch.equal(prefix[0], prefix[1])
    assert torch.equal(prefix, run.plain_prefix(step, run.plan(step)))
    shared = _Run(cfg.replace(prefix_draw="sequence"), _Processes(torch.device("cpu")))
    assert shared.plain_prefix(step, shared.plan(step)).shape == (8,)
    history = train(cfg.replace(steps=6)).history
    assert np.isfinite(history["loss"]).all()
    assert TrainConfig.from_dict({k: v for k, v in tiny().to_dict().items() if k != "prefix_draw"}) == tiny()
    with pytest.raises(ValueError, match="prefix_draw.*multipass"):
        tiny(prefix_draw="pass", schedule="interleaved")


def test_nan_guard_stops_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    real, calls = ScheduleOutput.pass_losses, itertools.count(1)

    def poisoned(*args, **kwargs):
        """The real pass losses, NaN at step 7 (one micro-batch per step, so call 7 is step 7)."""
        parts = real(*args, **kwargs)
        return [part * float("nan") for part in parts] if next(calls) == 7 else parts

    monkeypatch.setattr(ScheduleOutput, "pass_losses", poisoned)
    cfg = tiny(out_dir=str(tmp_path / "run"), checkpoint_every=5)
    with pytest.raises(NonFiniteLossError, match=r"step 7.*checkpoint.*\(step 5\)"):
        train(cfg)
    model = load_checkpoint(tmp_path / "run" / "checkpoint")
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert read_json(tmp_path / "run" / "checkpoint" / "train_state.json")["step"] == 5
    assert pd.read_csv(tmp_path / "run" / HISTORY_FILE)["step"].tolist() == [1, 2, 3, 4, 5, 6]


def test_the_loss_figure_callback_writes_the_run_on_the_way_and_when_it_stops(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    written = []
    real = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: (written.append(
        len(fig.axes[0].lines[0].get_xdata())), real(fig, *a, **k))[1])
    path = tmp_path / "loss.png"
    train(tiny(steps=6, log_every=1), callback=wb.plots.LossFigure(path, title="t", every=4))
    assert written == [4, 6] and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["loss.png"]  # no temporary left beside it
    written.clear()
    with pytest.raises(_Interrupt):  # stopped by an exception: the rows logged so far are drawn
        train(tiny(steps=6, log_every=1), callback=_Both(_interrupt_at(3), wb.plots.LossFigure(path)))
    assert written == [3]
    with pytest.raises(ValueError, match="every"):
        wb.plots.LossFigure(path, every=-1)


class _Interrupt(Exception):
    pass


def _interrupt_at(step: int):
    def callback(row):
        if row["step"] == step:
            raise _Interrupt
    return callback


class _Both:
    """Two callbacks as one: each row to both, the end of the run to the second."""

    def __init__(self, first, second):
        self.first, self.second = first, second

    def __call__(self, row):
        self.second(row)
        self.first(row)

    def on_train_end(self, history):
        self.second.on_train_end(history)


def test_resume_after_interruption_is_exact(tmp_path):
    """In-process version of the SIGKILL test (tests/test_train_resume.py): every random choice of
    the FBT recipe (pass mix, prefixes, jitter) is replayed exactly after a resume."""
    cfg = tiny(**FBT_RECIPE, steps=16, checkpoint_every=5, eval_every=8)
    straight = train(cfg.replace(out_dir=str(tmp_path / "a"), checkpoint_every=0))  # how often one saves: runtime
    interrupted = cfg.replace(out_dir=str(tmp_path / "b"))
    with pytest.raises(_Interrupt):
        train(interrupted, callback=_interrupt_at(8))  # rows 6..8 are on disk past the step-5 checkpoint
    assert pd.read_csv(tmp_path / "b" / HISTORY_FILE)["step"].max() == 8
    resumed = train(interrupted.replace(resume=True, checkpoint_every=3))
    for h in (straight.history, resumed.history, pd.read_csv(tmp_path / "b" / HISTORY_FILE)):
        assert list(h["step"]) == list(range(1, 17))
    cols = [c for c in straight.history.columns if c != "seconds"]
    pd.testing.assert_frame_equal(resumed.history[cols], straight.history[cols], check_exact=True)
    a, b = straight.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(ValueError, match=r"\['lr'\]"):
        train(interrupted.replace(resume=True, lr=1e-3))


def test_a_moved_run_says_where_and_from_which_step_it_resumed(tmp_path, capsys):
    """A run directory moved between the interruption and the resume resumes all the same; its metrics (and the
    train command's summary line) say from which checkpoint, at its new place, and from which step."""
    from workbench.cli import main

    flags = ["--task-param", "length=16", "--task-param", "p=5", "--n-layer", "2", "--n-head", "2", "--n-embd", "32",
             "--batch-size", "8", "--eval-size", "16", "--log-every", "1", "--steps", "8", "--checkpoint-every", "5",
             "--no-progress"]
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    for first, moved in (("a", "b"), ("c", "d")):
        with pytest.raises(_Interrupt):
            train(config_from_args(parser.parse_args([*flags, "--out", str(tmp_path / first)])),
                  callback=_interrupt_at(7))
        (tmp_path / first).rename(tmp_path / moved)
    result = train(config_from_args(parser.parse_args([*flags, "--out", str(tmp_path / "b"), "--resume"])))
    assert result.metrics["resumed_from"] == str(tmp_path / "b" / "checkpoint")
    assert result.metrics["resumed_at_step"] == 5 and result.metrics["step"] == 8
    assert "resumed_from" not in train(tiny(steps=2)).metrics  # a fresh run resumed from nothing
    capsys.readouterr()
    assert main(["train", *flags, "--out", str(tmp_path / "d"), "--resume"]) == 0
    assert f"resumed from {tmp_path / 'd' / 'checkpoint'} at step 5" in capsys.readouterr().out


def test_a_resumed_run_counts_the_cpu_time_of_every_part(tmp_path, monkeypatch):
    """CPU seconds ride in the checkpoint like the wall seconds: a run stopped at step 8 (checkpoint at 5) and
    resumed reports the 5 steps before the checkpoint plus the 11 after it, as an unbroken run of 16 does. A fake
    process clock that advances half a second a reading (two a step) makes each step cost exactly half a second."""
    trainer = importlib.import_module("workbench.train")  # the module: wb.train is the function
    clock = itertools.count()
    monkeypatch.setattr(trainer, "time", types.SimpleNamespace(perf_counter=time.perf_counter,
                                                               process_time=lambda: next(clock) / 2))
    cfg = tiny(steps=16, checkpoint_every=5)
    assert train(cfg.replace(out_dir=str(tmp_path / "a"))).metrics["cpu_seconds"] == pytest.approx(8.0)
    with pytest.raises(_Interrupt):
        train(cfg.replace(out_dir=str(tmp_path / "b")), callback=_interrupt_at(8))
    assert read_json(tmp_path / "b" / "checkpoint" / "train_state.json")["cpu_seconds"] == pytest.approx(2.5)
    resumed = train(cfg.replace(out_dir=str(tmp_path / "b"), resume=True))
    assert resumed.metrics["cpu_seconds"] == pytest.approx(8.0)  # 2.5 before the checkpoint, 5.5 after it


def test_grad_accum_and_micro_batches_do_not_change_the_maths():
    """Unequal lengths, interleaved subsets: micro-batches hold different numbers of targets per pass,
    so only an exact per-pass weighting makes 4 micro-batches agree with one. AdamW, because Muon's
    Newton-Schulz iteration runs in bfloat16 and turns float32 summation noise into 1e-3 differences."""
    cfg = tiny(task_params=dict(p=5, length=16, min_length=4), model=dict(TINY_MODEL, mechanism="lrt"),
               schedule="interleaved", steps=6, optimizer="adamw")
    one, four = train(cfg).history, train(cfg.replace(grad_accum=4)).history
    for col in ("loss", "loss_pass1", "loss_pass3", "val_loss"):
        np.testing.assert_allclose(four[col], one[col], rtol=1e-5)
    np.testing.assert_allclose(four["grad_norm"], one["grad_norm"], rtol=1e-4)


def test_passes_without_targets_contribute_nothing_instead_of_nan():
    """delayed_memory puts its 3 targets at the end: interleaved subset s misses them when no target
    position is s mod S. An empty mean would be NaN and trip the guard; the trainer counts it as 0."""
    cfg = tiny(task="delayed_memory", task_params={"scratch_updates": 0},
               model=dict(TINY_MODEL, mechanism="lrt"), schedule=wb.schedules.Interleaved(8), steps=2,
               batch_size=4, eval_size=4)
    h = train(cfg).history
    assert np.isfinite(h["loss"]).all()
    assert (h[[f"loss_pass{k}" for k in range(1, 10)]] == 0).any(axis=None)


def test_live_loss_plot_redraws_one_output(monkeypatch):
    shown = []

    class Handle:
        def update(self, fig):
            shown.append(("update", fig))

    def display(fig, display_id):
        shown.append(("display", fig))
        return Handle()

    monkeypatch.setattr("IPython.get_ipython", lambda: type("Shell", (), {"kernel": object()})())  # a notebook
    monkeypatch.setattr("IPython.display.display", display)
    live = wb.LiveLossPlot(every=2)
    train(tiny(steps=6), callback=live)
    assert [kind for kind, _ in shown] == ["display", "update", "update"]
    assert all(fig.axes for _, fig in shown) and len(live.rows) == 6
    shown.clear()
    live = wb.LiveLossPlot(every=4)  # rows 5-6 come after the last redraw: the end of the run shows them
    train(tiny(steps=6), callback=live)
    assert [kind for kind, _ in shown] == ["display", "update"]
    assert len(shown[0][1].axes[0].lines[0].get_xdata()) == 4 and len(shown[1][1].axes[0].lines[0].get_xdata()) == 6


def test_live_loss_plot_outside_a_notebook_draws_nothing(capsys):
    """In a terminal IPython's display would print the figure's repr (Figure(650x420)) into the progress bar."""
    live = wb.LiveLossPlot(every=1)
    with pytest.warns(UserWarning, match="LossFigure"):
        train(tiny(steps=4), callback=live)
    assert capsys.readouterr().out == "" and len(live.rows) == 4


def test_cli_flags_build_the_config():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--task", "running_sum", "--task-param", "length=16", "--task-param", "p=5",
                              "--mechanism", "fbt", "--n-layer", "2", "--n-embd", "32", "--n-head", "2",
                              "--model-param", "fbt_jitter=0.01", "--schedule", "multipass",
                              "--pass-mix", "1:0.75,2:0.22,3:0.03", "--steps", "50",
                              "--out", "runs/x", "--resume", "--no-progress", "--lr", "0.001", "--compile"])
    cfg = config_from_args(args)
    assert cfg == TrainConfig(task="running_sum", task_params={"length": 16, "p": 5},
                              schedule=wb.schedules.PassMix.of({1: 0.75, 2: 0.22, 3: 0.03}),
                              model=dict(TINY_MODEL, mechanism="fbt", fbt_jitter=0.01, tie_embeddings=True),
                              steps=50,
                              out_dir="runs/x", resume=True, progress=False, lr=0.001, compile=True)
    assert config_from_args(parser.parse_args([])) == TrainConfig()
    assert config_from_args(parser.parse_args(["--schedule", "fixed_point", "--passes", "9", "--aux-weight", "2"])
                            ).schedule == wb.schedules.FixedPoint(9, aux_weight=2.0)
    with pytest.raises(ValueError, match="passes"):  # a knob of another schedule is refused, not ignored
        config_from_args(parser.parse_args(["--schedule", "interleaved", "--passes", "3"]))
    # each field's flag says what TrainConfig's docstring says of it (one text, two readers), with its default
    helps = {a.dest: a.help for a in parser._actions}
    docs = wb.config.field_docs(TrainConfig)
    assert helps["grad_clip"] == docs["grad_clip"] + " (default: 1.0)"
    assert helps["out_dir"].startswith("The run directory") and set(docs) == {f.name for f in dataclasses.fields(
        TrainConfig)}


def test_cli_budget_flops_sizes_the_steps_so_the_schedule_ends_within_it():
    """``--budget-flops`` sizes the run up front (experiments.matched_steps): all its steps run, the learning rate
    decays to the schedule's end, and the FLOPs stay within the budget (a cap would stop it at the peak)."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert "matched_steps" in parser.format_help()
    flags = ["--task-param", "length=16", "--task-param", "p=5", "--n-layer", "2", "--n-head", "2", "--n-embd", "32",
             "--batch-size", "8", "--eval-size", "16", "--log-every", "1", "--lr-schedule", "cosine", "--no-progress"]
    base = config_from_args(parser.parse_args(flags))
    budget = step_flops(base) * 7.5
    cfg = config_from_args(parser.parse_args([*flags, "--budget-flops", str(budget)]))
    assert cfg.steps == matched_steps(base, budget) == 7 and cfg.budget_flops is None
    result = train(cfg)
    assert result.metrics["stop_reason"] == "steps" and result.metrics["step"] == 7
    assert result.metrics["flops"] <= budget
    lrs = result.history["lr"].to_numpy()
    assert lrs[-1] == pytest.approx(cfg.lr * lr_factor(cfg, 6)) and lrs[-1] < lrs[0] == cfg.lr
    for bad in (["--steps", "5", "--budget-flops", str(budget)], ["--budget-flops", str(budget / 4)]):
        with pytest.raises(ValueError, match="--budget-flops"):
            config_from_args(parser.parse_args([*flags, *bad]))


@pytest.mark.slow
@pytest.mark.compiles
def test_compiled_training_follows_the_eager_run():
    """torch.compile changes float rounding, not the maths: the same losses to ~1e-5 (LRT, interleaved), from whole
    graphs (a graph break, e.g. an error message composed from a traced value, costs speed on every call)."""
    from torch._dynamo.utils import counters

    # one layer: inductor's cold compile (most of this test's time) grows with the graph
    cfg = tiny(model=dict(TINY_MODEL, n_layer=1, mechanism="lrt", lrt_gamma_init=0.1), schedule="interleaved",
               steps=4, optimizer="adamw")
    eager = train(cfg).history
    counters.clear()
    compiled = train(cfg.replace(compile=True)).history
    assert not counters["graph_break"], list(counters["graph_break"])
    for column in ("loss", "loss_pass1", "loss_pass3", "val_loss"):
        np.testing.assert_allclose(compiled[column].to_numpy(), eager[column].to_numpy(), rtol=1e-4, equal_nan=True)


def test_a_fine_tune_starts_from_the_saved_weights_at_another_length_and_fusion_only(tmp_path):
    """``init_from`` copies a checkpoint's weights; a fine-tune may change what does not change which parameters
    there are (the length: rotary positions are computed; the jitter; the FBT fusion), nothing else."""
    source = tmp_path / "source"
    train(tiny(model=dict(TINY_MODEL, mechanism="fbt"), steps=2, out_dir=str(source)))
    saved = load_checkpoint(source / "checkpoint")
    longer = dict(TINY_TASK, length=40)
    result = train(tiny(model=dict(TINY_MODEL, mechanism="fbt", fbt_fusion="additive"), task_params=longer, steps=1,
                        optimizer="adamw", lr=1e-12, init_from=str(source / "checkpoint")))
    assert result.model.config.seq_len > saved.config.seq_len and result.model.config.fbt_fusion == "additive"
    for name, weight in saved.state_dict().items():
        torch.testing.assert_close(result.model.state_dict()[name], weight, rtol=0, atol=1e-9)
    with pytest.raises(ValueError, match="init_from"):
        train(tiny(model=dict(TINY_MODEL, mechanism="fbt", n_embd=16), steps=1, init_from=str(source / "checkpoint")))


def test_the_progress_bar_labels_each_pass_loss_not_their_sum():
    from workbench.train import progress_losses

    assert progress_losses({"passes": 1, "loss": 2.5, "loss_pass1": 2.5}) == {"loss": "2.5000"}
    assert progress_losses({"passes": 2, "loss": 5.0, "loss_pass1": 2.75, "loss_pass2": 2.25}) == {
        "pass1": "2.750", "pass2": "2.250"}

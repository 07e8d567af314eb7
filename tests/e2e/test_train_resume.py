"""Exact resume after a hard kill: a training process SIGKILLed after a checkpoint, then resumed with
``--resume``, writes the same ``history.csv`` (every column but wall time) and the same final
weights as an uninterrupted run of the same command."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from workbench.checkpoint import read_safetensors

pytestmark = pytest.mark.subprocess

STEPS = 30
COMMAND = [sys.executable, "-m", "workbench", "train", "--task", "running_sum", "--task-param", "p=5",
           "--task-param", "length=16", "--n-layer", "2", "--n-head", "2", "--n-embd", "32",
           "--mechanism", "fbt", "--schedule", "multipass", "--pass-mix", "1:0.5,2:0.3,3:0.2",
           "--feedback-start", "0.2", "--prefix-mixin", "0.5", "--steps", str(STEPS), "--batch-size", "8",
           "--eval-every", "10", "--eval-size", "16", "--log-every", "1", "--checkpoint-every", "5",
           "--no-progress"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}


def _launch(out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([*COMMAND, "--out", str(out), *extra], env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _last_logged_step(out: Path) -> int:
    try:
        with (out / "history.csv").open() as f:
            lines = f.read().splitlines()
        return int(lines[-1].split(",")[0]) if len(lines) > 1 else 0
    except (OSError, ValueError):  # not written yet, or a row half-written
        return 0


def _checkpoint_step(out: Path) -> int:
    try:
        return json.loads((out / "checkpoint" / "train_state.json").read_text())["step"]
    except (OSError, ValueError):  # not there yet, or being replaced
        return 0


def _history_without_seconds(out: Path) -> list[list[str]]:
    with (out / "history.csv").open(newline="") as f:
        rows = list(csv.reader(f))
    drop = rows[0].index("seconds")
    return [r[:drop] + r[drop + 1:] for r in rows]


def test_sigkill_then_resume_gives_the_same_history(tmp_path):
    straight = _launch(tmp_path / "straight")
    victim = _launch(tmp_path / "killed")
    deadline = time.monotonic() + 120
    while True:
        ckpt = _checkpoint_step(tmp_path / "killed")
        if ckpt and _last_logged_step(tmp_path / "killed") > ckpt:
            victim.send_signal(signal.SIGKILL)
            break
        assert victim.poll() is None, f"the run ended before it could be killed: {victim.communicate()}"
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.005)
    victim.communicate()
    assert victim.returncode == -signal.SIGKILL
    killed_at = _checkpoint_step(tmp_path / "killed")
    assert 0 < killed_at < STEPS
    assert _last_logged_step(tmp_path / "killed") > killed_at  # rows past the checkpoint, to be dropped

    resumed = _launch(tmp_path / "killed", "--resume")
    out, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err
    assert f"{STEPS} steps" in out
    out, err = straight.communicate(timeout=120)
    assert straight.returncode == 0, err

    history = _history_without_seconds(tmp_path / "killed")
    assert [r[0] for r in history[1:]] == [str(s) for s in range(1, STEPS + 1)]
    assert history == _history_without_seconds(tmp_path / "straight")
    a = read_safetensors(tmp_path / "straight" / "checkpoint" / "model.safetensors")
    b = read_safetensors(tmp_path / "killed" / "checkpoint" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
